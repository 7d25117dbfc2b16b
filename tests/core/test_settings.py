"""Settings precedence: defaults < TOML file < environment < explicit overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from recalld.config import Settings, load_settings
from recalld.errors import InvalidInputError


@pytest.fixture(autouse=True)
def user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the user config and data dirs at an empty folder (no stray config.toml)."""
    home = tmp_path / "home"
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(name, str(home / name.lower()))
    return home


@pytest.fixture
def toml(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        'db = "/from/file.db"\n'
        'embedder = "fake:16"\n'
        'preset = "thorough"\n'
        "max_content_chars = 500\n",
        encoding="utf-8",
    )
    return path


def test_defaults(user_dirs: Path) -> None:
    settings = load_settings(environ={}, config_file=None)
    assert settings.embedder == "local"
    assert settings.preset == "balanced"
    assert settings.max_content_chars == 100_000
    assert settings.db == user_dirs / "xdg_data_home" / "recalld" / "memory.db"
    assert settings.cache_dir == user_dirs / "xdg_cache_home" / "recalld"


def test_default_config_file_in_the_user_config_dir(user_dirs: Path) -> None:
    folder = user_dirs / "xdg_config_home" / "recalld"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text('preset = "fast"\n', encoding="utf-8")
    assert load_settings(environ={}).preset == "fast"


def test_file_beats_defaults(toml: Path) -> None:
    settings = load_settings(config_file=toml, environ={})
    assert (settings.db, settings.embedder, settings.preset) == (
        Path("/from/file.db"), "fake:16", "thorough")  # fmt: skip
    assert settings.max_content_chars == 500
    assert settings.openai_base_url == "https://api.openai.com/v1"  # untouched default


def test_environment_beats_file(toml: Path) -> None:
    environ = {"RECALLD_EMBEDDER": "fake:8", "RECALLD_MAX_CONTENT_CHARS": "42"}
    settings = load_settings(config_file=toml, environ=environ)
    assert settings.embedder == "fake:8"
    assert settings.max_content_chars == 42  # strings from the environment are parsed
    assert settings.preset == "thorough"  # the file still wins over defaults


def test_overrides_beat_environment(toml: Path) -> None:
    environ = {"RECALLD_EMBEDDER": "fake:8", "RECALLD_DB": "/from/env.db"}
    overrides = {"embedder": "fake:4", "db": None, "preset": "fast"}
    settings = load_settings(overrides, config_file=toml, environ=environ)
    assert settings.embedder == "fake:4"
    assert settings.db == Path("/from/env.db")  # a None override means "not given"
    assert settings.preset == "fast"


def test_config_file_named_by_the_environment(toml: Path) -> None:
    settings = load_settings(environ={"RECALLD_CONFIG": str(toml)})
    assert settings.preset == "thorough"


def test_given_environ_replaces_the_process_environment(
    toml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECALLD_PRESET", "fast")
    monkeypatch.setenv("RECALLD_CONFIG", str(toml))
    assert load_settings(environ={}).preset == "balanced"
    assert load_settings().preset == "fast"  # no environ given: the real one is read
    # Settings built directly hold only what they are given.
    assert Settings(db=Path("x.db")).preset == "balanced"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('db = "unterminated\n', "not valid TOML"),
        ('colour = "blue"\n', "unknown setting"),
        ("max_content_chars = -1\n", "invalid settings"),
        ('max_content_chars = "many"\n', "invalid settings"),
    ],
)
def test_bad_config_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInputError) as caught:
        load_settings(config_file=path, environ={})
    assert message in str(caught.value)


def test_missing_named_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        load_settings(config_file=tmp_path / "nope.toml", environ={})
    with pytest.raises(InvalidInputError):
        load_settings(environ={"RECALLD_CONFIG": str(tmp_path / "nope.toml")})


def test_bad_environment_and_overrides(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        load_settings(environ={"RECALLD_EMBED_BATCH_SIZE": "0"}, config_file=None)
    with pytest.raises(InvalidInputError):
        load_settings({"no_such_setting": 1}, environ={})


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValueError):
        settings.preset = "fast"  # type: ignore[misc]
