"""The OpenAI-compatible chat client and its cache, against a real loopback server."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from model_server import ModelServer, Reply, chat

from recalld.config import Settings, load_settings
from recalld.errors import InvalidInputError, ModelError
from recalld.providers import llm as llm_module
from recalld.providers.llm import CallFailed, ModelCache, OpenAIChat, ask, resolve_llm

MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries wait milliseconds, not the production quarter second."""
    monkeypatch.setattr(llm_module, "BACKOFF_S", 0.01)


def client(server: ModelServer, timeout: float = 2.0) -> OpenAIChat:
    return OpenAIChat("tiny", server.url + "/v1", api_key="sk-test", timeout=timeout)


def test_a_valid_answer_is_the_message_content(server: ModelServer) -> None:
    server.queue("/v1/chat/completions", chat("hi there"))
    assert client(server).complete(MESSAGES) == "hi there"
    path, body = server.requests[0]
    assert path == "/v1/chat/completions"
    assert body["model"] == "tiny" and body["messages"] == MESSAGES and body["temperature"] == 0


def test_429_then_success_is_retried(server: ModelServer) -> None:
    server.queue("/v1/chat/completions", Reply({"error": "slow down"}, 429,
                 headers={"Retry-After": "0"}), chat("ok"))  # fmt: skip
    answer, usage = ask(client(server), MESSAGES, "v1", None)
    assert answer == "ok"
    assert usage.calls == 2 and usage.cache_hits == 0


def test_500_gives_up_after_bounded_retries(server: ModelServer) -> None:
    server.queue("/v1/chat/completions", Reply({"error": "boom"}, 500))
    with pytest.raises(CallFailed, match="500") as failed:
        ask(client(server), MESSAGES, "v1", None)
    assert server.paths("/v1/chat/completions") == llm_module.RETRIES + 1
    assert failed.value.usage.calls == llm_module.RETRIES + 1


def test_a_slow_answer_times_out_without_retrying(server: ModelServer) -> None:
    server.queue("/v1/chat/completions", Reply(chat("late").body, delay_s=1.5))
    started = time.perf_counter()
    with pytest.raises(ModelError, match="in time"):
        client(server, timeout=0.3).complete(MESSAGES)
    assert time.perf_counter() - started < 1.2
    assert server.paths("/v1/chat/completions") == 1


@pytest.mark.parametrize(
    "reply",
    [
        Reply("not json at all"),
        Reply({"choices": []}),
        Reply({"choices": [{"message": {"content": 42}}]}),
        Reply({"error": "bad request"}, 400),
    ],
    ids=["malformed-json", "no-choice", "content-not-text", "400"],
)
def test_a_broken_answer_is_a_model_error(server: ModelServer, reply: Reply) -> None:
    server.queue("/v1/chat/completions", reply)
    with pytest.raises(ModelError):
        client(server).complete(MESSAGES)


def test_an_unreachable_endpoint_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="unreachable"):
        OpenAIChat("tiny", "http://127.0.0.1:9/v1", timeout=1.0).complete(MESSAGES)


def test_answers_are_cached_on_disk_by_model_version_and_input(
    server: ModelServer, tmp_path: Path
) -> None:
    server.queue("/v1/chat/completions", chat("first"), chat("second"))
    cache = ModelCache(tmp_path / "models.sqlite")
    model = client(server)
    assert ask(model, MESSAGES, "v1", cache)[0] == "first"
    cache.close()
    reopened = ModelCache(tmp_path / "models.sqlite")
    answer, usage = ask(model, MESSAGES, "v1", reopened)
    assert (answer, usage.calls, usage.cache_hits) == ("first", 0, 1)
    assert server.paths("/v1/chat/completions") == 1
    assert ask(model, MESSAGES, "v2", reopened)[0] == "second"  # a new prompt version asks
    reopened.close()


def test_the_llm_is_off_unless_configured(tmp_path: Path) -> None:
    assert resolve_llm(Settings(db=tmp_path / "m.db")) is None
    env = {"RECALLD_LLM": "openai:llama3", "RECALLD_LLM_BASE_URL": "http://127.0.0.1:1/v1",
           "RECALLD_LLM_TIMEOUT": "2.5"}  # fmt: skip
    settings = load_settings(config_file=None, environ=env)
    assert (settings.llm, settings.llm_base_url, settings.llm_timeout) == (
        "openai:llama3", "http://127.0.0.1:1/v1", 2.5)  # fmt: skip
    model = resolve_llm(settings)
    assert model is not None and model.model_id == "openai:llama3"
    with pytest.raises(InvalidInputError, match="openai:MODEL"):
        resolve_llm(Settings(db=tmp_path / "m.db", llm="gpt-4o"))
