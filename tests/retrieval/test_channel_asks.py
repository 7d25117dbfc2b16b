"""What each channel asks of a store for what a search knows (``channels.request``)."""

from datetime import UTC, datetime

import numpy as np

from recalld.records import MemoryFilter, TimeRange
from recalld.retrieval.channels import Need, request, split_channels
from recalld.stores.asks import EntitiesAsk, NearestAsk, RecentAsk, TextAsk, WordsAsk

POOL = {"semantic": 40, "bm25": 40, "entity": 40, "temporal": 40}
WINDOW = TimeRange(datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 4, 1, tzinfo=UTC))


def test_every_channel_asks_what_it_needs_and_no_more() -> None:
    need = Need(POOL, ("kayak",), "kayak 東京タ 東", ("ana",), None, with_vector=True)
    asks = request(need, MemoryFilter(project="p")).asks
    assert asks == {
        "semantic": NearestAsk(40),
        "bm25": WordsAsk(40, ("kayak",)),
        "trigram": TextAsk(40, "kayak 東京タ 東"),
        "substring": TextAsk(40, "kayak 東京タ 東"),
        "entity": EntitiesAsk(40, ("ana",)),
    }


def test_a_time_window_asks_the_window_by_vector_or_else_by_recency() -> None:
    by_vector = request(Need(POOL, window=WINDOW, with_vector=True)).asks
    assert by_vector == {
        "semantic": NearestAsk(40),
        "window_semantic": NearestAsk(40, window=WINDOW),
    }
    by_recency = request(Need(POOL, window=WINDOW)).asks
    assert by_recency == {"temporal": RecentAsk(40, window=WINDOW)}


def test_a_list_of_limit_zero_or_a_query_without_its_parts_asks_nothing() -> None:
    assert request(Need({"semantic": 40}, ("kayak",), "kayak")).asks == {}
    assert request(Need({"bm25": 0}, ("kayak",), "kayak", with_vector=True)).asks == {}
    assert request(Need(POOL, (), "", ())).asks == {}


def test_the_vector_channels_split_from_the_others_and_take_the_vector_later() -> None:
    asked = request(Need(POOL, ("kayak",), "kayak", window=WINDOW, with_vector=True))
    vector_part, words_part = split_channels(asked)
    assert list(vector_part.asks) == ["semantic", "window_semantic"]
    assert words_part is not None and list(words_part.asks) == ["bm25"]
    assert vector_part.needs_vector and not words_part.needs_vector
    vector = np.ones(4, dtype=np.float32)
    given = vector_part.with_vector(vector)
    assert not given.needs_vector and given.query_vector is vector
    only_vector, none = split_channels(request(Need({"semantic": 5}, with_vector=True)))
    assert none is None and list(only_vector.asks) == ["semantic"]
