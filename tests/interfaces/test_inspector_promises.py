"""The inspector keeps the user's promises, in a real browser (Debian's Chromium, Playwright):
Browse flags superseded rows; a search puts a replacement above what it replaced and says
why; the context block marks the replaced fact; a forgotten memory's content shows nowhere,
not even in another memory's lineage. And what a new user meets first: a page that says
what the store holds (or how to fill it) before any search, an icon instead of a 404, a
growth chart that ends on the last day stored.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.interfaces.test_inspector import browser, open_page  # noqa: F401 (a fixture)

import recalld
from recalld.config import Settings
from recalld.interfaces.http import create_app
from recalld.providers.embedders import Embedder

pytestmark = [pytest.mark.browser, pytest.mark.integration]

LISBON = "I live in Lisbon, in the Alfama district."
PORTO = "I moved from Lisbon to Porto last month."
EXPIRED = "The office is closed this week for the move."
SECRET_NEWER = "the new gate code is 8642"
SECRET_OLDER = "the old gate code was 1357"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, local_embedder: Embedder) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("promised")
    full = Settings(db=folder / "memory.db", cache_dir=None)
    ids: dict[str, str] = {}
    with recalld.open(settings=full, embedder=local_embedder) as engine:
        ids["lisbon"] = engine.add(LISBON).id
        engine.add("My sister plays the cello in an orchestra.")
        ids["porto"] = engine.add(PORTO).id
        engine.supersede(ids["lisbon"], by=ids["porto"])
        ids["expired"] = engine.add(EXPIRED).id
        engine.supersede(ids["expired"], until=datetime.now(UTC) - timedelta(days=1))
        # a gate: the older code replaced by a newer one the user then forgot, and a
        # forgotten older code that the current one replaced
        ids["gate"] = engine.add("the gate of the garden has a keypad").id
        newer = engine.add(SECRET_NEWER).id
        engine.supersede(ids["gate"], by=newer)
        engine.forget(newer)
        older = engine.add(SECRET_OLDER).id
        engine.supersede(older, by=ids["porto"])
        engine.forget(older)
    return {"full": full, "empty": Settings(db=folder / "empty.db", cache_dir=None),
            "ids": ids}  # fmt: skip


def serve(settings: Settings, embedder: Embedder) -> Iterator[str]:
    """The app under uvicorn on loopback, in a thread; yields its address."""
    import uvicorn

    app = create_app(settings, embedder=embedder)
    runner = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not runner.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    assert runner.started
    yield f"http://127.0.0.1:{runner.servers[0].sockets[0].getsockname()[1]}"
    runner.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def base(stores: dict[str, Any], local_embedder: Embedder) -> Iterator[str]:
    yield from serve(stores["full"], local_embedder)


@pytest.fixture(scope="module")
def empty_base(stores: dict[str, Any], local_embedder: Embedder) -> Iterator[str]:
    with recalld.open(settings=stores["empty"], embedder=local_embedder):
        pass  # create the store
    yield from serve(stores["empty"], local_embedder)


def test_browse_flags_superseded_rows(browser: Any, base: str, stores: dict[str, Any]) -> None:  # noqa: F811
    ids = stores["ids"]
    with open_page(browser, base) as seen:
        p = seen.open()
        p.click("button.tab[data-tab=browse]")
        p.wait_for_selector(f"#memories tr[data-id='{ids['porto']}']")
        flagged = p.locator("#memories tr[data-superseded=true]")
        flagged_ids = {flagged.nth(i).get_attribute("data-id") for i in range(flagged.count())}
        assert flagged_ids == {ids["lisbon"], ids["expired"], ids["gate"]}
        row = p.locator(f"#memories tr[data-id='{ids['lisbon']}']")
        assert "superseded" in row.locator(".flag").text_content()
        assert row.locator(".flag").get_attribute("title") == f"replaced by {ids['porto']}"
        assert p.locator(f"#memories tr[data-id='{ids['porto']}'] .flag").count() == 0
        # A forgotten memory's content shows nowhere: not in the list, not in a lineage.
        assert SECRET_NEWER not in p.content() and SECRET_OLDER not in p.content()
        p.click(f"#memories tr[data-id='{ids['gate']}']")
        p.wait_for_selector("#lineage >> text=superseded by")
        assert "(forgotten)" in p.locator("#lineage").text_content()
        p.click(f"#memories tr[data-id='{ids['porto']}']")
        p.wait_for_selector(f"#lineage >> text={LISBON}")
        assert SECRET_NEWER not in p.content() and SECRET_OLDER not in p.content()


def test_a_search_and_its_context_block_keep_the_supersede(browser: Any, base: str) -> None:  # noqa: F811
    with open_page(browser, base) as seen:
        p = seen.open()
        p.fill("#q", "where do I live?")
        p.fill("input[name=near_misses]", "0")
        p.click("#search-form button[type=submit]")
        p.wait_for_selector("#hits li.hit")
        p.wait_for_selector("#context:not([hidden])")
        first = p.locator("#hits li.hit").first
        assert first.locator(".content").text_content() == PORTO
        lisbon = p.locator("#hits li.hit", has_text=LISBON)
        assert lisbon.locator(".flag").text_content() == "superseded"
        lisbon.locator("button.explain").click()
        assert "never ranked above" in lisbon.locator(".promises").text_content()
        block = p.locator("#context").text_content()
        line = next(x for x in block.splitlines() if LISBON in x)
        assert f'by: "{PORTO}"]' in line and "[replaced on " in line
        assert p.locator("#welcome").is_hidden()


def test_the_first_view_says_what_the_store_holds(browser: Any, base: str) -> None:  # noqa: F811
    with open_page(browser, base) as seen:
        p = seen.open()
        p.wait_for_selector("#welcome li.hit")
        text = p.locator("#welcome").text_content()
        assert "memories" in text and "ask a question above" in text
        assert p.locator("#welcome li.hit").count() == 5
        assert SECRET_NEWER not in text and SECRET_OLDER not in text


def test_an_empty_store_says_how_to_fill_it(browser: Any, empty_base: str) -> None:  # noqa: F811
    with open_page(browser, empty_base) as seen:
        p = seen.open()
        p.wait_for_selector("#welcome >> text=holds no memory yet")
        assert "recalld add" in p.locator("#welcome pre").text_content()
        p.click("button.tab[data-tab=store]")
        p.wait_for_selector("#growth >> text=no memories yet")


def test_an_icon_and_a_growth_axis_that_ends_on_the_last_day(browser: Any, base: str) -> None:  # noqa: F811
    icon = httpx.get(base + "/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert httpx.get(base + "/inspector/icon.svg").content == icon.content
    with open_page(browser, base) as seen:
        failed: list[str] = []
        seen.page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
        p = seen.open()
        p.click("button.tab[data-tab=store]")
        p.wait_for_selector("#growth rect.day")
        days = httpx.get(base + "/v1/status").json()["store"]["added_by_day"]
        labels = [t.text_content() for t in p.locator("#growth text").all()]
        last = max(days)
        start = (datetime.fromisoformat(last) - timedelta(days=6)).date().isoformat()
        assert last in labels and start in labels  # a week, ending on the last day stored
        assert not [x for x in labels if x[:4].isdigit() and "-" in x and x > last]
        assert not failed, failed


def test_serve_says_where_the_page_is(tmp_path: Path, recalld_command: list[str]) -> None:
    from tests.conftest import subprocess_env

    from recalld.interfaces.cli_serve import free_port

    env = {**subprocess_env(tmp_path), "RECALLD_DB": str(tmp_path / "memory.db")}
    port = free_port()
    import subprocess

    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen([*recalld_command, "serve", "--port", str(port)], env=env,
                                  stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and "HTTP API on" not in log.read_text():
                assert server.poll() is None, log.read_text()
                time.sleep(0.2)
            time.sleep(0.5)
        finally:
            server.terminate()
            server.wait(timeout=30)
    said = log.read_text()
    assert f"inspector at http://127.0.0.1:{port}/ " in said, said
