"""Configuration: one typed ``Settings`` object resolved at the edge and passed down.

Precedence, lowest first: defaults < config file (TOML) < environment (``RECALLD_*``) <
explicit arguments (CLI flags or keyword arguments). Library code never reads the
environment itself; only :func:`load_settings` does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from recalld.errors import InvalidInputError
from recalld.locations import (
    APP_NAME as APP_NAME,
    default_cache_dir as default_cache_dir,
    default_config_file as default_config_file,
    default_data_dir as default_data_dir,
    default_store,
    expand_location as expand_location,
    expand_path as expand_path,
    is_dsn as is_dsn,
    merge_sources,
)

DEFAULT_BATCH_TEXTS = 32
"""Texts per model call unless ``embed_batch_tokens`` cuts the batch first (docs/ingest.md)."""
DEFAULT_BATCH_TOKENS = 1024
"""Padded tokens per model call: 4 windows of 256 tokens, or 32 short texts. A call's
activations grow with the batch's tokens times its longest text: 8,192 tokens took the
packaged model's process to about 1 GB, 1,024 to about 410 MB, with no more CPU time per
text (docs/ingest.md)."""
DEFAULT_EMBED_THREADS = 0
"""0: onnxruntime's own count, one thread per physical core (docs/ingest.md)."""


class Settings(BaseSettings):
    """Everything recalld needs to open a store; each field is one canonical setting."""

    model_config = SettingsConfigDict(env_prefix="RECALLD_", frozen=True, extra="forbid")

    db: Path | str = Field(default_factory=default_store)
    """The store: an SQLite file, or a PostgreSQL DSN (``postgresql://...``)."""
    embedder: str = "local"
    """``local`` (packaged all-MiniLM-L6-v2), ``multilingual`` (multilingual-e5-small from the
    ``multilingual`` extra), ``onnx:/path/to/folder``, ``openai:MODEL`` (OpenAI-compatible
    HTTP) or ``fake`` (tests only)."""
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: str | None = None
    openai_dimensions: int | None = None
    embed_query_prefix: str | None = None
    """Text put before every query for the ``onnx:`` and ``openai:`` embedders (e5's
    ``"query: "``; part of the fingerprint). ``None``: an ``onnx:`` folder's own prompt
    (``config_sentence_transformers.json``), else none."""
    embed_document_prefix: str | None = None
    """Text put before every stored text (e5's ``"passage: "``), as ``embed_query_prefix``."""
    cache_dir: Path | None = Field(default_factory=default_cache_dir)
    """Where the embedding cache lives; ``None`` disables it."""
    max_content_chars: int = Field(default=100_000, gt=0)
    """Content longer than this is refused (split it, or index it as a file)."""
    embed_batch_size: int = Field(default=DEFAULT_BATCH_TEXTS, gt=0)
    """The most texts (or windows of long texts) per model call."""
    embed_batch_tokens: int = Field(default=DEFAULT_BATCH_TOKENS, gt=0)
    """The most padded tokens (texts x the longest one's tokens) per model call: batches of
    short texts grow long, batches of long ones stay within memory."""
    embed_threads: int = Field(default=DEFAULT_EMBED_THREADS, ge=0)
    """Threads the local model uses to embed stored texts; 0 lets onnxruntime take one per
    core. The int8 query session fits the load instead (docs/ingest.md)."""
    int8_queries: bool = True
    """Embed queries with int8 matrix products (local ONNX models with int8 weights): about
    2.5 ms less a search, at a cosine of ~0.995 to the float32 vector. Stored vectors are
    always float32 products, so switching this never calls for a reindex."""
    preset: str = "balanced"
    """The retrieval preset searches use unless a call names another."""
    tenant: str = "default"
    """The tenant (a user or an organisation) the store is opened for: every call reaches
    only its memories and the shared namespaces in ``shared``."""
    shared: tuple[str, ...] = ()
    """Shared namespaces the tenant is granted (read and write); a comma-separated list in
    ``RECALLD_SHARED``."""

    http_max_body_bytes: int = Field(default=10_000_000, gt=0)
    """``recalld serve`` refuses request bodies larger than this (413)."""
    http_max_json_depth: int = Field(default=64, gt=0)
    """``recalld serve`` refuses request bodies whose arrays and objects nest deeper (400),
    before parsing them."""
    http_max_batch: int = Field(default=1000, gt=0)
    """The most memories one ``POST /v1/memories`` may add (422 beyond)."""
    http_rate_limit: int = Field(default=600, ge=0)
    """Requests a minute each API key may make (429 beyond, with ``Retry-After``); bursts
    up to the same number are allowed. 0 turns the limit off."""
    http_search_concurrency: int = Field(default=0, ge=0)
    """Searches (``/v1/search``, ``/v1/context``) ``recalld serve`` runs at once; the others
    wait their turn, first come first served. 0: twice the cores. A search is CPU work, and
    more of them at once than cores only take turns at Python's lock (docs/http.md)."""

    @field_validator("db", mode="before")
    @classmethod
    def _path_unless_dsn(cls, value: object) -> object:
        if isinstance(value, str | os.PathLike) and not is_dsn(value):
            return Path(value)
        return value

    @field_validator("shared", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    llm: str | None = None
    """``openai:MODEL`` switches on the LLM stages (query expansion, ``auto`` routing) against
    any OpenAI-compatible chat endpoint; unset (the default), no LLM is ever called."""
    llm_base_url: str = "https://api.openai.com/v1"
    llm_api_key: str | None = None
    llm_timeout: float = Field(default=10.0, gt=0)
    """Seconds one LLM or reranker request may take before its stage is skipped."""
    reranker: str | None = None
    """``onnx:/folder`` (a cross-encoder), ``llm`` (the configured LLM), ``http:URL`` (a
    ``/v1/rerank`` endpoint) or ``maxsim`` (late interaction on the packaged MiniLM);
    unset (the default), the rerank stage is skipped."""
    reranker_api_key: str | None = None
    """Bearer token for an ``http:`` reranker."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only explicit values: :func:`load_settings` alone reads the file and environment."""
        return (init_settings,)


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve settings: defaults < file < environment < ``overrides`` (None values ignored).

    Args:
        overrides: explicit values, such as CLI flags; ``None`` entries are skipped.
        config_file: a TOML file; defaults to ``RECALLD_CONFIG`` or the user config dir.
        environ: the environment to read; defaults to ``os.environ``.
    """
    values = merge_sources(
        Settings.model_fields, overrides, config_file=config_file, environ=environ
    )
    unknown = sorted(set(values) - set(Settings.model_fields))
    if unknown:
        raise InvalidInputError(
            f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(Settings.model_fields)}"
        )
    try:
        # Values are already merged in precedence order (Settings itself reads no environment).
        return Settings.model_validate(values)
    except ValidationError as exc:
        raise InvalidInputError(f"invalid settings: {exc}") from exc
