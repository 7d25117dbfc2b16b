"""The offline entity extractor: names, not the capital letters that open sentences."""

from __future__ import annotations

import pytest

from recalld.entities import extract_entities


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Speaker labels stay; greetings and exclamations that open a sentence do not.
        ("Caroline: Hey Mel! Good to see you! How have you been?", ["caroline", "mel"]),
        ("Melanie: Wow, that's cool, Caroline! What's up? Anything new?", ["melanie", "caroline"]),
        # Imperatives opening list items are not names; list numbers are not quantities.
        ("Tips:\n1. Sit up straight.\n2) Keep your feet flat.\n- Avoid crossing legs.", []),
        ("I'll go. I'm sure. I've seen it.", []),
        # A numbered item with a colon is not a speaker label.
        ("Ways to engage:\n\n1. Vote: It is the simplest.\nJohn: I agree.", ["john"]),
        # A name inside a sentence, and a multi-word name opening one.
        ("Yesterday I met Priya at the Museum of Modern Art.",
         ["priya", "museum of modern art", "museum", "modern", "art"]),
        ("New York is big.", ["new york", "new", "york"]),
        # A word opening a sentence counts when the text capitalises it elsewhere too.
        ("Priya called. I told Priya about it.", ["priya"]),
        # Quantities, quoted titles.
        ('I paid 20 dollars for "Dune", 20% off, and 3.5kg of flour in 2020 and more.',
         ["dune", "20 dollars", "20%", "3.5kg"]),
    ],
)  # fmt: skip
def test_extracts_names_and_quantities(text: str, expected: list[str]) -> None:
    assert extract_entities(text) == expected


def test_a_name_that_only_opens_sentences_is_the_known_miss() -> None:
    # Documented trade: without a lexicon, "Sarah went home." reads like "Sit up straight."
    assert extract_entities("Sarah went home.") == []
    assert extract_entities("I drove Sarah home.") == ["sarah"]


def test_limit_and_order() -> None:
    text = " ".join(f"I met Person{i} there." for i in range(40))
    found = extract_entities(text, limit=5)
    assert found == [f"person{i}" for i in range(5)]
