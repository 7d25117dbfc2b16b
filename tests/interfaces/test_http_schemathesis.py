"""Schemathesis with every check (``--checks all``) against a real ``recalld serve`` on a
loopback port: the OpenAPI document declares every limit the server enforces, and the
server keeps to it (valid data accepted, invalid data refused, no 500, the declared
statuses, headers and schemas, ``Allow`` on a 405, stateful sequences). Bounded: a couple
of dozen cases per operation and phase, a fixed seed, a time limit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from serve_helpers import free_port, wait_until_serving

import recalld
from recalld.config import Settings
from recalld.keys import create_key

pytestmark = pytest.mark.integration

RUN_SECONDS = 300
EXCEPTIONS = """
# No text field may hold a NUL character (refused with 422 at every door: PostgreSQL cannot
# store one); the document says so in words, since JSON Schema cannot say it of any key of
# a memory's metadata.
generation.allow-x00 = false


# The import's content must be a file of the named format, which JSON Schema cannot say.
[[operations]]
include-name = "POST /v1/import"
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "404", "409", "422"]

# A path must name one of the tenant's indexed files, and a collection must exist, which the
# document (one for every tenant) cannot say.
[[operations]]
include-name = "POST /v1/files"
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "404", "422"]

[[operations]]
include-name = "PUT /v1/collections/{name}/context"
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "404", "422"]

[[operations]]
include-name = "DELETE /v1/collections/{name}"
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "404", "422"]

# A memory's namespace must be one the caller's key is granted, which the document (one for
# every key) cannot say.
[[operations]]
include-name = "POST /v1/memories"
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "404", "409", "422"]
"""
"""What the document cannot declare, each with its reason; everything else is checked."""
SKIPPED_CHECKS = "use_after_free"
"""``DELETE`` hides a memory from search unless ``hard=true``; ``GET`` still shows it, with
``forgotten_at`` (``--checks all`` overrides a check the configuration turns off)."""


def test_schemathesis_with_every_check(tmp_path: Path, cli_env: dict[str, str],
                                       recalld_command: list[str]) -> None:  # fmt: skip
    runner = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    if runner is None:
        pytest.skip("schemathesis (the dev extra) is not installed next to this Python")
    db = tmp_path / "memory.db"
    with recalld.open(settings=Settings(db=db, cache_dir=None, embedder="fake")) as engine:
        key = create_key(engine.store, "fuzz")[1]  # not admin: /v1/index stays a 403
    port = free_port()
    env = {**cli_env, "RECALLD_DB": str(db), "RECALLD_EMBEDDER": "fake",
           "RECALLD_HTTP_RATE_LIMIT": "0"}  # fmt: skip
    config = tmp_path / "schemathesis.toml"
    config.write_text(EXCEPTIONS, encoding="utf-8")
    command = [*recalld_command, "serve", "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until_serving(server, port)
        done = subprocess.run(
            [runner, "--config-file", str(config), "run",
             f"http://127.0.0.1:{port}/openapi.json", "-H", f"Authorization: Bearer {key}",
             "--checks", "all", "--exclude-checks", SKIPPED_CHECKS, "--max-examples", "20",
             "--seed", "4", "--no-color"],
            capture_output=True, text=True, timeout=RUN_SECONDS, cwd=tmp_path,
        )  # fmt: skip
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert done.returncode == 0, done.stdout[-6000:]
    assert " passed" in done.stdout and "Traceback" not in err, err
