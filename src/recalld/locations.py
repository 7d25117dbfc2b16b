"""Where a store and the settings come from: paths expanded, sources merged in order.

Cheap to import (the standard library and platformdirs only): the shell resolves its store
with it before deciding whether to load anything heavier. :func:`recalld.config.load_settings`
validates what :func:`merge_sources` gathers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import platformdirs

from recalld.errors import InvalidInputError, StoreError

APP_NAME = "recalld"
ENV_PREFIX = "RECALLD_"
PATH_SETTINGS = ("db", "cache_dir")
"""Settings that name a path: ``~`` and environment variables in them are expanded."""

_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def is_dsn(location: object) -> bool:
    """Whether a store location names a PostgreSQL server rather than an SQLite file."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME))


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME))


def default_config_file() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def default_store() -> Path:
    return default_data_dir() / "memory.db"


def expand_path(value: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Path:
    """A path as a shell would read it: ``~`` and ``$VAR`` / ``${VAR}`` expanded (from
    ``environ``, default ``os.environ``), so ``RECALLD_DB='~/memory.db'`` in an agent's MCP
    settings, where no shell runs, still means the home folder. Unknown variables stay as
    written."""
    env = os.environ if environ is None else environ

    def variable(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return env.get(name, match.group(0))

    text = _VARIABLE.sub(variable, os.fspath(value))
    if text == "~" or text.startswith("~/"):
        text = (env.get("HOME") or os.path.expanduser("~")) + text[1:]
    return Path(os.path.expanduser(text))


def expand_location(value: object, environ: Mapping[str, str] | None = None) -> object:
    """A store location with its path expanded (a PostgreSQL DSN is left as written)."""
    if isinstance(value, str | os.PathLike) and not is_dsn(value):
        return expand_path(value, environ)
    return value


def store_exists(location: str | os.PathLike[str]) -> bool:
    """Whether there is a store to open at ``location``: an SQLite file must exist; a
    PostgreSQL database is the server's to have (connecting tells)."""
    return is_dsn(location) or str(location) == ":memory:" or Path(location).exists()


def missing_store(location: str | os.PathLike[str], how: str = "") -> StoreError:
    """The one-line error for a store that is not there: the resolved path, how to create it."""
    create = how or "the first `recalld add`, `import` or `index` creates it"
    return StoreError(
        f"no store at {Path(location).absolute()}: {create} (or point --db / "
        "RECALLD_DB at the store you meant)"
    )


def merge_sources(
    names: Iterable[str],
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The settings given, unvalidated, in precedence order: config file < environment
    (``RECALLD_<NAME>`` for each of ``names``) < ``overrides`` (None values skipped), with
    paths expanded.

    Raises:
        InvalidInputError: the named config file is missing or not valid TOML.
    """
    env = os.environ if environ is None else environ
    given = config_file or env.get("RECALLD_CONFIG") or None
    named = expand_path(given, env) if given is not None else None
    if named is not None and not named.is_file():
        raise InvalidInputError(f"config file {named} does not exist or is not a file")
    path = named or default_config_file()
    values: dict[str, Any] = {}
    if path.is_file():
        import tomllib  # only when a config file exists: the shell starts faster

        try:
            values.update(tomllib.loads(path.read_text(encoding="utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"config file {path} is not valid TOML: {exc}") from exc
    for name in names:
        key = ENV_PREFIX + name.upper()
        if key in env:
            values[name] = env[key]
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    for name in PATH_SETTINGS:
        if name in values:
            values[name] = expand_location(values[name], env)
    return values
