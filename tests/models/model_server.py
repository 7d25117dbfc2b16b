"""A real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions and ``/v1/rerank``
shapes with scripted answers. Bounded: it serves in a daemon thread and shuts itself down
after ``LIFETIME_S`` even if a test forgets to."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LIFETIME_S = 120.0


@dataclass
class Reply:
    """One scripted answer: a status, a body (dict/list as JSON, str as is), a delay."""

    body: Any = None
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def chat(content: Any) -> Reply:
    """A chat-completions answer whose message content is ``content`` (JSON-encoded unless a
    string)."""
    text = content if isinstance(content, str) else json.dumps(content)
    message = {"role": "assistant", "content": text}
    return Reply({"id": "x", "object": "chat.completion",
                  "choices": [{"index": 0, "message": message}]})  # fmt: skip


@dataclass
class ModelServer:
    """What the server answers (per path, in order; the last reply repeats) and what it saw."""

    url: str = ""
    script: dict[str, list[Reply]] = field(default_factory=dict)
    answer: Callable[[str, dict[str, Any]], Reply] | None = None
    """Used when a path has no script: computes a reply from the request."""
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def queue(self, path: str, *replies: Reply) -> None:
        self.script[path] = list(replies)

    def paths(self, path: str) -> int:
        return sum(1 for p, _ in self.requests if p == path)

    def next_reply(self, path: str, body: dict[str, Any]) -> Reply:
        replies = self.script.get(path)
        if replies:
            return replies.pop(0) if len(replies) > 1 else replies[0]
        if self.answer is not None:
            return self.answer(path, body)
        return Reply({"error": "no script"}, status=404)


@contextmanager
def model_server() -> Iterator[ModelServer]:
    state = ModelServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?")[0]
            state.requests.append((path, body))
            reply = state.next_reply(path, body)
            time.sleep(reply.delay_s)
            data = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
            raw = data.encode()
            try:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)  # fmt: skip
    thread.start()
    watchdog = threading.Timer(LIFETIME_S, server.shutdown)
    watchdog.daemon = True
    watchdog.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        watchdog.cancel()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
