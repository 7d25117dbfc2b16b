"""An optional chat model: any OpenAI-compatible ``/chat/completions`` endpoint.

That is OpenAI, OpenRouter, Ollama, vLLM, LM Studio or llama.cpp's server. Nothing here runs
unless the ``llm`` setting names a model. Answers are cached on disk keyed by (model,
prompt version, input hash), so a repeated query costs no call; every call reports what it
cost as a :class:`Usage`, which the search trace shows.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recalld.errors import InvalidInputError, ModelError
from recalld.private_files import private_file, private_folder
from recalld.stores.sqlite.locking import LOCK_WAIT_S, enable_wal

if TYPE_CHECKING:
    import httpx

    from recalld.config import Settings

Messages = Sequence[Mapping[str, str]]

RETRIES = 2
"""Further attempts after a 429 or 5xx answer (never after a timeout: a model that is too
slow once is too slow again, and a search must not wait several timeouts)."""
BACKOFF_S = 0.25
"""First wait before a retry, doubled each time (a ``Retry-After`` header is honoured up to
``MAX_BACKOFF_S``)."""
MAX_BACKOFF_S = 2.0


@dataclass(frozen=True)
class Usage:
    """What a stage's model calls cost: shown in the search trace."""

    calls: int = 0
    """Requests that reached the model (retries included)."""
    cache_hits: int = 0
    latency_ms: float = 0.0
    """Wall time spent waiting for the model (cache hits cost none)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.calls + other.calls,
            self.cache_hits + other.cache_hits,
            self.latency_ms + other.latency_ms,
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "latency_ms": round(self.latency_ms, 3),
        }


class CallFailed(ModelError):
    """A model call failed; carries what the failed attempts cost, for the trace."""

    def __init__(self, message: str, usage: Usage) -> None:
        super().__init__(message)
        self.usage = usage


class ModelCache:
    """One SQLite file of model answers, keyed by (model, prompt version, input hash)."""

    def __init__(self, path: Path | None) -> None:
        """``None`` keeps answers in memory only (for the life of the process)."""
        self._lock = threading.Lock()
        target = ":memory:" if path is None else str(path)
        try:
            if path is not None:  # private: the answers quote the user's searches
                private_folder(path.parent)
                private_file(path)
            self._db = sqlite3.connect(target, timeout=LOCK_WAIT_S, check_same_thread=False)
            if path is not None:
                enable_wal(self._db)
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS answers (model TEXT, version TEXT, hash TEXT,"
                " answer TEXT, PRIMARY KEY (model, version, hash)) WITHOUT ROWID"
            )
        except (OSError, sqlite3.Error) as exc:
            raise ModelError(f"cannot open the model cache {target}: {exc}") from exc

    @staticmethod
    def key(payload: object) -> str:
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()
        return hashlib.sha256(blob).hexdigest()

    def get(self, model: str, version: str, key: str) -> str | None:
        return self.get_many(model, version, [key]).get(key)

    def get_many(self, model: str, version: str, keys: Sequence[str]) -> dict[str, str]:
        marks = ",".join("?" * len(keys))
        with self._lock:
            rows = self._db.execute(
                f"SELECT hash, answer FROM answers WHERE model = ? AND version = ?"
                f" AND hash IN ({marks})",
                [model, version, *keys],
            ).fetchall()
        return {str(h): str(a) for h, a in rows}

    def put(self, model: str, version: str, key: str, answer: str) -> None:
        self.put_many(model, version, [(key, answer)])

    def put_many(self, model: str, version: str, items: Sequence[tuple[str, str]]) -> None:
        with self._lock, self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?)",
                [(model, version, k, a) for k, a in items],
            )

    def close(self) -> None:
        self._db.close()


class LLM(ABC):
    """A chat model. Subclasses implement :meth:`complete`."""

    model_id: str = "llm"
    """Capability: names the model in cache keys and traces."""

    @abstractmethod
    def complete(self, messages: Messages) -> str:
        """The assistant's answer to ``messages``; raises :class:`ModelError` on failure."""


class FakeLLM(LLM):
    """Answers from a function of the last user message: for tests and examples."""

    def __init__(self, answer: Callable[[str], str], model_id: str = "fake-llm") -> None:
        self._answer = answer
        self.model_id = model_id
        self.calls = 0

    def complete(self, messages: Messages) -> str:
        self.calls += 1
        return self._answer(messages[-1]["content"])


class OpenAIChat(LLM):
    """``POST {base_url}/chat/completions`` with a timeout and bounded retries."""

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        retries: int = RETRIES,
    ) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=timeout,
            event_hooks={"request": [self._sent]},
        )
        self.model_id = f"openai:{model}"
        self._model = model
        self._retries = retries
        self.attempts = 0
        """Requests sent (retries included), for :class:`Usage`."""

    def _sent(self, request: httpx.Request) -> None:
        self.attempts += 1

    def complete(self, messages: Messages) -> str:
        body = {"model": self._model, "messages": [dict(m) for m in messages], "temperature": 0}
        return _content(post_json(self._client, "/chat/completions", body, self._retries))

    def close(self) -> None:
        self._client.close()


def post_json(
    client: httpx.Client, url: str, body: object, retries: int = RETRIES
) -> httpx.Response:
    """POST with bounded retries and backoff on 429 / 5xx; a 200 answer or :class:`ModelError`."""
    import httpx

    wait = BACKOFF_S
    for attempt in range(1, retries + 2):
        try:
            response = client.post(url, json=body)
        except httpx.TimeoutException as exc:
            raise ModelError(f"no answer in time from {url} ({exc})") from exc
        except httpx.HTTPError as exc:
            raise ModelError(f"{url} is unreachable: {exc}") from exc
        if (response.status_code == 429 or response.status_code >= 500) and attempt <= retries:
            time.sleep(min(_retry_after(response) or wait, MAX_BACKOFF_S))
            wait *= 2
            continue
        if response.status_code != 200:
            raise ModelError(f"{url} answered {response.status_code}: {response.text[:200]}")
        return response
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return None


def _content(response: httpx.Response) -> str:
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ModelError(f"the LLM endpoint sent an unexpected body: {exc!r}") from exc
    if not isinstance(content, str):
        raise ModelError("the LLM endpoint sent a message whose content is not text")
    return content


def ask(llm: LLM, messages: Messages, version: str, cache: ModelCache | None) -> tuple[str, Usage]:
    """One cached completion and what it cost; raises :class:`ModelError` on failure."""
    key = ModelCache.key([dict(m) for m in messages])
    if cache is not None:
        found = cache.get(llm.model_id, version, key)
        if found is not None:
            return found, Usage(cache_hits=1)
    before = getattr(llm, "attempts", None)
    started = time.perf_counter()

    def spent() -> Usage:
        calls = 1 if before is None else getattr(llm, "attempts", before) - before
        return Usage(calls=calls, latency_ms=(time.perf_counter() - started) * 1000)

    try:
        answer = llm.complete(messages)
    except ModelError as exc:
        raise CallFailed(str(exc), spent()) from exc
    usage = spent()
    if cache is not None:
        cache.put(llm.model_id, version, key, answer)
    return answer, usage


def resolve_llm(settings: Settings) -> LLM | None:
    """The configured chat model, or ``None`` when the ``llm`` setting is empty."""
    spec = settings.llm
    if not spec:
        return None
    kind, _, model = spec.partition(":")
    if kind != "openai" or not model:
        raise InvalidInputError(
            f"unknown llm {spec!r}: use 'openai:MODEL' with llm_base_url naming any "
            "OpenAI-compatible endpoint (OpenAI, OpenRouter, Ollama, vLLM, LM Studio, llama.cpp)"
        )
    return OpenAIChat(model, settings.llm_base_url, settings.llm_api_key, settings.llm_timeout)
