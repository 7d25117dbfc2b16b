"""The inspector's hit view names a collection's file and its context lines, in a real
browser (Debian's Chromium, Playwright) against the app on a loopback port; the context
block shows each collection's line once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.interfaces.test_inspector import browser, open_page  # noqa: F401 (a fixture)
from tests.interfaces.test_inspector_promises import serve

import recalld
from recalld.config import Settings
from recalld.providers.embedders import FakeEmbedder

pytestmark = [pytest.mark.browser, pytest.mark.integration]

AUTH = "# Auth\n\nTokens expire after one hour.\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("collections")
    docs = folder / "docs" / "api"
    docs.mkdir(parents=True)
    (docs / "auth.md").write_text(AUTH, encoding="utf-8")
    (folder / "docs" / "intro.md").write_text("# Intro\n\nTokens are issued at login.\n")
    settings = Settings(db=folder / "memory.db", cache_dir=None, embedder="fake")
    with recalld.open(settings=settings, embedder=FakeEmbedder()) as engine:
        engine.index([Path(folder / "docs")], globs=["**/*.md"], name="docs",
                     context="Work documentation")  # fmt: skip
        engine.set_context("docs", "API reference", path="api")
    yield from serve(settings, FakeEmbedder())


def test_a_hit_shows_its_collection_and_lines(browser: Any, base: str) -> None:  # noqa: F811
    with open_page(browser, base) as seen:
        p = seen.open()
        p.fill("#q", "when do tokens expire")
        p.click("#search-form button[type=submit]")
        p.wait_for_selector("#hits li.hit")
        auth = p.locator("#hits li.hit", has_text="expire after one hour")
        label = auth.locator(".collection")
        assert label.locator(".path").text_content() == "docs/api/auth.md"
        assert label.locator(".context").all_text_contents() == [
            "Work documentation",
            "API reference",
        ]
        p.wait_for_selector("#context:not([hidden])")
        block = p.locator("#context").text_content() or ""
        assert block.count("- docs: Work documentation") == 1
        assert "- docs/api: API reference" in block
