"""The scripts under ``scripts/`` that the docs cite for their figures still load against the
package: a script that names a setting or function the code no longer has fails here, not
in the hands of whoever reruns a measurement (``bench_ab.py`` read a constant removed a
day before)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LOAD_ALL = """
import importlib.util, sys, traceback
from pathlib import Path

sys.path.insert(0, "scripts")  # scripts import their siblings (reliability_common)
loaded = 0
for path in sorted(Path("scripts").glob("*.py")):
    name = "script_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does: dataclasses look their module up
    try:
        spec.loader.exec_module(module)  # not __main__: nothing runs but the definitions
    except BaseException:
        print(f"{path}: " + traceback.format_exc().strip().splitlines()[-1])
    else:
        loaded += 1
print("loaded", loaded)
"""


def test_every_script_loads_against_the_package() -> None:
    found = sorted((ROOT / "scripts").glob("*.py"))
    assert len(found) > 20  # the folder this checks is the one the docs cite
    done = subprocess.run(
        [sys.executable, "-c", LOAD_ALL],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    failed = done.stdout.splitlines()[:-1]
    assert failed == [], "\n".join(failed)
    assert done.stdout.splitlines()[-1] == f"loaded {len(found)}"
