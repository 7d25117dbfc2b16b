"""Take docs/images/inspector.png: the inspector on the sample conversation, a search with
the first hit's explanation open, in headless Chromium.

    .venv/bin/python scripts/inspector_screenshot.py [--chromium /usr/bin/chromium] [--out PATH]

The store is built in a temporary folder from examples/sample_conversation.jsonl; the
server is the real app under uvicorn on 127.0.0.1 (an ephemeral port).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

import recalld
from recalld.config import Settings
from recalld.interfaces.http import create_app
from recalld.providers.embedders import resolve_embedder
from recalld.requests import ImportRequest

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "when does my sister arrive?"
AS_OF = "2026-04-20"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/images/inspector.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(db=Path(folder) / "memory.db", cache_dir=None)
        embedder = resolve_embedder("local")
        with recalld.open(settings=settings, embedder=embedder) as memory:
            sample = ROOT / "examples/sample_conversation.jsonl"
            memory.run_import(ImportRequest(path=str(sample)))
        app = create_app(settings, embedder=embedder)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            shoot(f"http://127.0.0.1:{port}/", args.chromium, args.out)
        finally:
            server.should_exit = True
            thread.join(timeout=10)
    print(f"{args.out} ({args.out.stat().st_size // 1024} KB)")


def shoot(url: str, chromium: str, out: Path) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(url)
        page.wait_for_selector("body[data-ready='true']")
        page.fill("#q", QUESTION)
        page.fill("input[name=as_of]", AS_OF)
        page.fill("input[name=limit]", "3")
        page.fill("input[name=near_misses]", "2")
        page.fill("input[name=max_tokens]", "120")
        page.click("#search-form button[type=submit]")
        page.wait_for_selector("#near-misses li.hit")
        page.locator("#hits li.hit").first.locator("button.explain").click()
        page.locator("#near-misses li.hit").first.locator("button.explain").click()
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
