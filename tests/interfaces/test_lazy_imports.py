"""``import recalld`` and ``recalld --help`` stay cheap: no heavy module is imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("onnxruntime", "tokenizers", "httpx", "matplotlib", "rich", "psycopg", "torch", "mcp",
         "starlette", "uvicorn", "anyio")  # fmt: skip


def loaded_after(code: str, env: dict[str, str]) -> set[str]:
    """Run ``code`` in a fresh interpreter and return the top-level modules it left loaded."""
    probe = (
        code
        + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_import_recalld_is_light(cli_env: dict[str, str]) -> None:
    loaded = loaded_after("import recalld", cli_env)
    assert "recalld" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize(
    "args", [["--help"], ["search", "--help"], ["mcp", "--help"], ["--version"]]
)
def test_cli_help_is_light(cli_env: dict[str, str], args: list[str]) -> None:
    code = (
        "import sys\n"
        "from recalld.interfaces.cli import cli\n"
        f"try:\n    cli.main({args!r}, prog_name='recalld')\n"
        "except SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
    )
    loaded = loaded_after(code, cli_env)
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_the_probe_sees_heavy_imports(cli_env: dict[str, str]) -> None:
    """The probe itself works: a real embedder load does show up."""
    loaded = loaded_after("from recalld.providers.embedders import resolve_embedder\n"
                          "resolve_embedder('local')", cli_env)  # fmt: skip
    assert {"onnxruntime", "tokenizers"} <= loaded
