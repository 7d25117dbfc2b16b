"""Write docs/api.md, the Python API reference, from the public names' own docstrings.

    PYTHONPATH=src .venv/bin/python scripts/api_reference.py [--check]

``--check`` writes nothing and exits 1 when docs/api.md differs from what the code says
(tests/docs/test_api_reference.py runs it), so the page cannot drift from the docstrings.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import recalld

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
HEADER = """# Python API reference

Generated from the docstrings by `scripts/api_reference.py`; do not edit by hand. Everything
here is importable from the package itself (`import recalld`); the pages
[getting-started.md](getting-started.md) and [concepts.md](concepts.md) show it in use, and
[memory-fields.md](memory-fields.md) explains every field of a memory.
"""
FACADE = ("open", "load_settings", "migrate_store")
"""Functions, in the order a reader meets them."""
ENGINE = "MemoryEngine"
RECORDS = ("NewMemory", "AddResult", "Memory", "MemoryFilter", "TimeRange", "SearchResult",
           "Hit", "ChannelHit", "Trace", "InCollection", "Context", "Source", "Collection",
           "FileSet", "IndexedFile", "Status", "MigrationReport", "RetrievalConfig",
           "Settings")  # fmt: skip
"""Records and settings: their fields, with the docstring each field has."""
PIPE = "\\|"
"""A table cell's escaped bar."""
ERRORS = ("RecalldError", "InvalidInputError", "NotFoundError", "StoreError",
          "EmbedderMismatchError", "EmbedderError")  # fmt: skip


SECTIONS = ("Args:", "Returns:", "Raises:", "Yields:", "Example:", "Examples:")
"""Google-style docstring sections, rendered as a bold title over a list."""


def _doc(thing: Any) -> str:
    return inspect.cleandoc(thing.__doc__ or "").strip()


def _markdown(doc: str) -> str:
    """A docstring as Markdown: reST roles and literals as code, sections as lists."""
    text = re.sub(r":(?:class|func|meth|attr|exc):`~?([^`]+)`", r"`\1`", doc).replace("``", "`")
    lines: list[str] = []
    for line in text.splitlines():
        if line.strip() in SECTIONS:
            lines += ["", f"**{line.strip()[:-1]}**", ""]
        elif re.match(r"    \S", line) and re.match(r"\s*[*\w]+( \(.*\))?: ", line):
            name, _, about = line.strip().partition(": ")
            lines.append(f"- `{name}`: {about}")
        elif line.startswith("    ") and lines and lines[-1].startswith("- "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines).strip()


def _parameter(parameter: inspect.Parameter) -> str:
    text = parameter.name
    if parameter.kind is parameter.VAR_KEYWORD:
        text = "**" + text
    elif parameter.kind is parameter.VAR_POSITIONAL:
        text = "*" + text
    if parameter.annotation is not parameter.empty:
        text += f": {parameter.annotation}"
    if parameter.default is not parameter.empty:
        text += f" = {parameter.default!r}"
    return text


def _signature(name: str, function: Any) -> str:
    signature = inspect.signature(function)
    parts: list[str] = []
    for parameter in signature.parameters.values():
        if parameter.name == "self":
            continue
        if (
            parameter.kind is parameter.KEYWORD_ONLY
            and "*" not in parts
            and not any(part.startswith("*") for part in parts)
        ):
            parts.append("*")
        parts.append(_parameter(parameter))
    returned = signature.return_annotation
    arrow = "" if returned is signature.empty else f" -> {returned}"
    return f"### `{name}({', '.join(parts)}){arrow}`"


def _function(name: str, function: Any) -> list[str]:
    return [_signature(name, function), "", _markdown(_doc(function)) or "(no docstring)", ""]


def _engine_methods() -> list[str]:
    engine = getattr(recalld, ENGINE)
    lines = [f"## `{ENGINE}`", "", _markdown(_doc(engine)), ""]
    for name, member in inspect.getmembers(engine):
        if name.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
            continue
        if isinstance(member, property):
            lines += [
                f"### `{name}` (property)",
                "",
                _markdown(_doc(member)) or "(no docstring)",
                "",
            ]
        else:
            lines += _function(f"{ENGINE}.{name}", member)
    return lines


def _field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (a string right after a field) read from the class's source."""
    import ast

    tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(cls)))
    found: dict[str, str] = {}
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    for node, after in zip(body, body[1:], strict=False):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            found[node.target.id] = _markdown(" ".join(str(after.value.value).split()))
    return found


def _fields(cls: type) -> list[tuple[str, str]]:
    if dataclasses.is_dataclass(cls):
        return [(f.name, str(f.type)) for f in dataclasses.fields(cls)]
    model_fields = getattr(cls, "model_fields", {})
    return [(name, str(info.annotation).replace("typing.", "")) for name, info in
            model_fields.items()]  # fmt: skip


def _record(name: str, cls: type | None = None, title: str = "") -> list[str]:
    cls = cls or getattr(recalld, name)
    notes = _field_docs(cls)
    lines = [
        title or f"### `{name}`",
        "",
        _markdown(_doc(cls)),
        "",
        "| field | type | about |",
        "|---|---|---|",
    ]
    for field_name, annotation in _fields(cls):
        about = notes.get(field_name, "").replace("|", PIPE)
        lines.append(f"| `{field_name}` | `{annotation.replace('|', PIPE)}` | {about} |")
    return [*lines, ""]


def _config_sections() -> list[str]:
    """Each section of ``RetrievalConfig``, its settings named as ``config.<section>.<name>``
    reads them (the flat names ``with_changes`` and ``--set`` take are the same but one)."""
    from recalld.retrieval.config import SECTIONS

    lines: list[str] = []
    for section, cls in SECTIONS.items():
        lines += _record(section, cls, f"### `RetrievalConfig.{section}` (`{cls.__name__}`)")
    return lines


def _errors() -> list[str]:
    lines = ["## Errors", "", "| error | exit code | when |", "|---|---|---|"]
    for name in ERRORS:
        cls = getattr(recalld, name)
        lines.append(f"| `{name}` | {cls.exit_code} | {_markdown(_doc(cls)).splitlines()[0]} |")
    return [*lines, ""]


def render() -> str:
    lines = [HEADER, "## Functions", ""]
    for name in FACADE:
        lines += _function(f"recalld.{name}", getattr(recalld, name))
    lines += _engine_methods()
    lines += ["## Records and settings", ""]
    for name in RECORDS:
        lines += _record(name)
        if name == "RetrievalConfig":
            lines += _config_sections()
    lines += _errors()
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE} is stale: run scripts/api_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
