"""The web inspector in a real browser: Debian's Chromium driven by Playwright, against a real
``recalld serve`` on loopback (a subprocess) and, for keys and tenants, the same app under
uvicorn in a thread.

What the page shows must be what the API and the CLI say: the bars of a hit's explanation
carry the numbers ``recalld search --explain --json`` prints, the near misses are its near
misses. Memory content is untrusted: markup in it shows as text and runs nothing. The page
asks nothing of any host but the server, and a key sees only its tenant's memories.

Chromium: ``make browser`` (run by ``make test``) installs Debian's package when it is
missing; without one these tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright
from tests.conftest import subprocess_env

import recalld
from recalld.config import Settings
from recalld.interfaces.http import create_app
from recalld.keys import create_key
from recalld.providers.embedders import Embedder

pytestmark = [pytest.mark.browser, pytest.mark.integration]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HOSTILE = "<img src=x onerror=alert(1)> <script>alert(2)</script> kestrel launch notes"
FORGETTABLE = "forget me: the old wifi password was hunter2"
QUESTION = "when does my sister arrive?"
AS_OF = "2026-04-20"


def chromium() -> str | None:
    """Debian's Chromium (or the one ``RECALLD_CHROMIUM`` names)."""
    given = os.environ.get("RECALLD_CHROMIUM")
    if given:
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser tests: install Chromium (`make browser`)")
        pytest.skip("no Chromium here: `make browser` (apt-get install chromium) runs these")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, headless=True)
        yield launched
        launched.close()


@dataclass
class Page:
    """A browser page on a server, with every request it made and every dialog it opened."""

    page: Any
    base: str
    requests: list[str]
    dialogs: list[str]

    def open(self) -> Any:
        self.page.goto(self.base + "/")
        self.page.wait_for_selector("body[data-ready='true']")
        return self.page


@contextmanager
def open_page(browser: Any, base: str) -> Iterator[Page]:
    context = browser.new_context()
    page = context.new_page()
    seen = Page(page, base, [], [])
    page.on("request", lambda request: seen.requests.append(request.url))

    def dialog(d: Any) -> None:
        seen.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    yield seen
    context.close()
    outside = [u for u in seen.requests if urlsplit(u)[:2] != urlsplit(base)[:2]]
    assert not outside, f"the page asked other hosts: {outside}"
    assert seen.requests, "the page made no request at all"


# -- a real `recalld serve` on a keyless store -------------------------------------------------


@dataclass(frozen=True)
class Served:
    base: str
    db: Path
    env: dict[str, str]
    command: list[str]


def free_port() -> int:
    from recalld.ports import free_port as pick

    return pick()


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, local_embedder: Embedder, recalld_command: list[str]
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("inspector")
    db = folder / "memory.db"
    with recalld.open(settings=Settings(db=db, cache_dir=None), embedder=local_embedder) as memory:
        memory.run_import(
            recalld.requests.ImportRequest(path=str(EXAMPLES / "sample_conversation.jsonl"))
        )
        memory.add(HOSTILE, tags=["<b>tag</b>"], session_id="s9")
        memory.add(FORGETTABLE, session_id="s9")
    env = {**subprocess_env(folder), "RECALLD_DB": str(db)}
    port = free_port()
    log = (folder / "serve.log").open("wb")
    server = subprocess.Popen([*recalld_command, "serve", "--port", str(port)], env=env,
                              stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert server.poll() is None, (folder / "serve.log").read_text()
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail("recalld serve did not answer within 120 s")
        yield Served(base, db, env, recalld_command)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Page]:
    with open_page(browser, served.base) as seen:
        yield seen


def cli_json(served: Served, *args: str) -> Any:
    done = subprocess.run([*served.command, "--json", *args], env=served.env, capture_output=True,
                          text=True, timeout=300, check=True)  # fmt: skip
    return json.loads(done.stdout)


def shown(item: Any) -> dict[str, Any]:
    """One hit as the page drew it: id, score, the bars' numbers, why it lost."""
    bars = item.locator(".bar[data-channel]")
    factors = item.locator(".bar[data-adjustment]")
    lost = item.locator(".lost")
    return {
        "id": item.get_attribute("data-id"),
        "score": float(item.locator(".score").get_attribute("data-score")),
        "fusion": {bars.nth(i).get_attribute("data-channel"):
                   float(bars.nth(i).get_attribute("data-value")) for i in range(bars.count())},
        "adjustments": {factors.nth(i).get_attribute("data-adjustment"):
                        float(factors.nth(i).get_attribute("data-value"))
                        for i in range(factors.count())},
        "lost": lost.text_content() if lost.count() else None,
    }  # fmt: skip


def printed(hit: dict[str, Any], missed: bool) -> dict[str, Any]:
    trace = hit["trace"]
    return {
        "id": hit["memory"]["id"],
        "score": hit["score"],
        "fusion": trace["fusion"],
        "adjustments": trace["adjustments"],
        "lost": "lost: " + "; ".join(trace["filters"]) if missed else None,
    }


# -- the tests -------------------------------------------------------------------------------


def test_the_page_and_its_files_say_where_they_may_load_from(served: Served) -> None:
    for path in ("/", "/inspector/app.js", "/inspector/app.css"):
        answer = httpx.get(served.base + path)
        assert answer.status_code == 200
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
    page = httpx.get(served.base + "/").text
    assert "<script>" not in page and "http://" not in page and "https://" not in page
    assert httpx.get(served.base + "/inspector/../pyproject.toml").status_code == 404
    assert httpx.get(served.base + "/inspector/engine.py").status_code == 404


def test_search_bars_and_near_misses_are_the_clis_numbers(page: Page, served: Served) -> None:
    p = page.open()
    p.fill("#q", QUESTION)
    p.fill("input[name=as_of]", AS_OF)
    p.fill("input[name=limit]", "4")
    p.fill("input[name=near_misses]", "3")
    p.click("#search-form button[type=submit]")
    p.wait_for_selector("#hits li.hit")
    p.wait_for_selector("#near-misses li.hit")
    first = p.locator("#hits li.hit").first
    assert first.locator(".trace").is_hidden()
    first.locator("button.explain").click()
    assert first.locator(".trace").is_visible()
    assert first.locator(".trace .bar[data-channel]").count() >= 1
    assert first.locator(".trace .bar[data-channel] .fill").first.bounding_box()["width"] > 0
    hits = [
        shown(p.locator("#hits li.hit").nth(i)) for i in range(p.locator("#hits li.hit").count())
    ]
    near = [shown(p.locator("#near-misses li.hit").nth(i))
            for i in range(p.locator("#near-misses li.hit").count())]  # fmt: skip
    expected = cli_json(served, "search", QUESTION, "-n", "4", "--near-misses", "3",
                        "--as-of", AS_OF, "--explain")  # fmt: skip
    assert hits == [printed(h, False) for h in expected["hits"]]
    assert near == [printed(h, True) for h in expected["near_misses"]]
    assert len(hits) == 4 and len(near) == 3
    assert any(f != 1.0 for h in hits for f in h["adjustments"].values())
    context = p.locator("#context")
    assert context.is_visible() and "Ana" in context.text_content()


def test_markup_in_a_memory_shows_as_text_and_runs_nothing(page: Page) -> None:
    p = page.open()
    p.fill("#q", "kestrel launch notes")
    p.click("#search-form button[type=submit]")
    p.wait_for_selector("#hits li.hit")
    top = p.locator("#hits li.hit").first
    assert top.locator(".content").text_content() == HOSTILE
    top.locator("button.link").click()  # its full record in Browse
    p.wait_for_selector("#detail:not([hidden])")
    assert p.locator("#detail-content").text_content() == HOSTILE
    assert p.locator("#record").get_by_text("<b>tag</b>", exact=False).count() == 1
    p.wait_for_timeout(300)  # a broken image's onerror would fire by now
    assert p.locator("main img, main script, #record b, #hits .content *").count() == 0
    assert page.dialogs == []
    assert p.evaluate("document.querySelectorAll('script').length") == 1  # the page's own


def test_forget_from_the_page(page: Page, served: Served) -> None:
    p = page.open()
    p.click("button.tab[data-tab=browse]")
    row = p.locator("#memories tbody tr", has_text=FORGETTABLE)
    row.wait_for()
    row.click()
    p.wait_for_selector("#detail:not([hidden])")
    memory_id = p.locator("#detail-id").text_content()
    p.click("#forget")
    assert p.locator("#forget").text_content() == "Click again to forget"
    p.click("#forget")
    p.wait_for_selector("#detail", state="hidden")
    # The page hides the detail, then reloads the list: wait for that reload's table.
    p.locator("#memories tbody tr", has_text=FORGETTABLE).wait_for(state="detached")
    assert p.locator("#memories tbody tr", has_text=FORGETTABLE).count() == 0
    assert "forgotten" in p.locator("#notice").text_content()
    listed = httpx.get(served.base + "/v1/memories", params={"limit": 100}).json()["memories"]
    assert memory_id not in {m["id"] for m in listed}
    found = httpx.post(served.base + "/v1/search", json={"query": "old wifi password"}).json()
    assert memory_id not in {h["memory"]["id"] for h in found["hits"]}
    assert httpx.get(f"{served.base}/v1/memories/{memory_id}").json()["forgotten_at"]


def test_curate_pin_edit_supersede_and_see_the_session(page: Page, served: Served) -> None:
    p = page.open()
    p.click("button.tab[data-tab=browse]")
    p.locator("#memories tbody tr", has_text="Sintra was amazing").click()
    p.wait_for_selector("#detail:not([hidden])")
    memory_id = p.locator("#detail-id").text_content()
    assert p.locator("#session li.here").text_content().endswith("queue took two hours.")
    assert p.locator("#pin").text_content() == "Pin"
    p.click("#pin")
    expect(p.locator("#pin")).to_have_text("Unpin")
    p.fill("#edit-form input[name=tags]", "travel, family")
    p.click("#edit-form button[type=submit]")
    expect(p.locator("#notice")).to_have_text("saved")
    now = httpx.get(f"{served.base}/v1/memories/{memory_id}").json()
    assert now["pinned"] is True and now["tags"] == ["travel", "family"]
    newer = httpx.post(
        served.base + "/v1/memories",
        json={"content": "Ana wants to see Sintra again next spring", "session_id": "s6"},
    ).json()["id"]
    p.fill("#supersede-form input[name=by]", newer)
    p.click("#supersede-form button[type=submit]")
    p.wait_for_selector("#lineage >> text=superseded by")
    expect(p.locator("#lineage")).to_contain_text("see Sintra again")
    assert httpx.get(f"{served.base}/v1/memories/{memory_id}").json()["superseded_by"] == newer
    p.locator("#lineage button.link", has_text=newer).click()  # follow it to the newer one
    expect(p.locator("#detail-id")).to_have_text(newer)
    expect(p.locator("#lineage")).to_contain_text(f"supersedes {memory_id}")
    p.fill("#supersede-form input[name=by]", newer)
    p.click("#supersede-form button[type=submit]")  # a memory cannot supersede itself
    expect(p.locator("#notice")).to_contain_text("cannot supersede itself")
    p.locator("#lineage button.link", has_text=memory_id).click()
    expect(p.locator("#detail-id")).to_have_text(memory_id)
    p.click("#supersede-clear")
    p.wait_for_selector("#lineage >> text=supersedes nothing")
    assert httpx.get(f"{served.base}/v1/memories/{memory_id}").json()["superseded_by"] is None


def test_the_store_at_a_glance(page: Page, served: Served) -> None:
    status = httpx.get(served.base + "/v1/status").json()
    p = page.open()
    p.click("button.tab[data-tab=store]")
    p.wait_for_selector("#growth rect.day")
    fact = p.locator(".card[data-fact=memories] b")
    assert fact.text_content() == str(status["store"]["memories"])
    assert p.locator(".card[data-fact=embedder] b").text_content() == status["embedder"]
    assert "turn" in p.locator("#by-type").text_content()
    assert "direct" in p.locator("#by-source").text_content()
    days = p.locator("#growth rect.day")
    assert [days.nth(i).get_attribute("data-day") for i in range(days.count())] == list(
        status["store"]["added_by_day"])  # fmt: skip


# -- keys and tenants --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(
    tmp_path_factory: pytest.TempPathFactory, local_embedder: Embedder
) -> Iterator[dict[str, str]]:
    """The app under uvicorn on a store with keys: alice's memories, bob's key."""
    import uvicorn

    settings = Settings(db=tmp_path_factory.mktemp("keyed") / "memory.db", cache_dir=None)
    with recalld.open(settings=settings, embedder=local_embedder) as root:
        alice = create_key(root.store, "alice")[1]
        bob = create_key(root.store, "bob")[1]
    with recalld.open(settings=settings.model_copy(update={"tenant": "alice"}),
                      embedder=local_embedder) as own:  # fmt: skip
        own.add("alice's kestrel secret: the launch code is 0000", session_id="a1")
    app = create_app(settings, embedder=local_embedder)
    runner = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not runner.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    assert runner.started
    port = runner.servers[0].sockets[0].getsockname()[1]
    yield {"base": f"http://127.0.0.1:{port}", "alice": alice, "bob": bob}
    runner.should_exit = True
    thread.join(timeout=10)


def test_a_key_sees_only_its_tenants_memories(browser: Any, keyed: dict[str, str]) -> None:
    with open_page(browser, keyed["base"]) as seen:
        p = seen.open()
        p.click("button.tab[data-tab=browse]")
        expect(p.locator("#notice")).to_contain_text("API key")
        assert p.locator("#memories tbody tr").count() == 0

        def use(key: str) -> None:
            p.fill("#key", key)
            p.click("#key-form button[type=submit]")
            assert p.evaluate("sessionStorage.getItem('recalld.key')") == key

        use(keyed["bob"])
        p.click("#browse-form button[type=submit]")
        expect(p.locator("#page-state")).to_have_text("no memories")
        p.click("button.tab[data-tab=search]")
        p.fill("#q", "kestrel launch code")
        p.click("#search-form button[type=submit]")
        expect(p.locator("#search-summary")).to_have_text(re.compile(r"^0 hit"))
        assert "0000" not in p.locator("main").text_content()
        p.click("button.tab[data-tab=store]")
        p.wait_for_selector(".card[data-fact=memories]")
        assert p.locator(".card[data-fact=memories] b").text_content() == "0"

        use(keyed["alice"])
        p.click("button.tab[data-tab=browse]")
        p.locator("#memories tbody tr", has_text="launch code is 0000").wait_for()
        p.click("#key-clear")
        assert p.evaluate("sessionStorage.getItem('recalld.key')") is None


# -- recalld ui --------------------------------------------------------------------------------


def test_recalld_ui_serves_the_page_on_loopback(served: Served, tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "ui.log").open("wb")
    ui = subprocess.Popen([*served.command, "ui", "--no-browser", "--port", str(port)],
                          env=served.env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and ui.poll() is None:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail((tmp_path / "ui.log").read_text())
        assert page.status_code == 200 and "recalld inspector" in page.text
        status = httpx.get(f"http://127.0.0.1:{port}/v1/status").json()  # the same store
        assert status["store"] == httpx.get(served.base + "/v1/status").json()["store"]
    finally:
        ui.terminate()
        ui.wait(timeout=30)
        log.close()
    said = (tmp_path / "ui.log").read_text()
    assert f"inspector at http://127.0.0.1:{port}/" in said


def test_the_browser_opens_once_the_server_answers(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recalld.interfaces import cli_serve

    opened: list[str] = []
    monkeypatch.setattr(cli_serve.webbrowser, "open", opened.append)
    assert cli_serve.open_when_up(served.base + "/")
    assert opened == [served.base + "/"]
    assert not cli_serve.open_when_up(f"http://127.0.0.1:{free_port()}/", timeout=0.5)
    assert opened == [served.base + "/"]
