"""``/docs``: the OpenAPI document as one self-contained HTML page.

Written on the server from the document itself, with no script, font or stylesheet to
fetch, so it works offline and behind a strict ``Content-Security-Policy`` (Swagger UI and
ReDoc load their assets from a CDN). Every value is escaped: descriptions and examples are
text, never markup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import Any

POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
"""The page needs nothing but its own inline style."""

_STYLE = """
body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;
color:#1d2433}
h2{border-bottom:1px solid #ccd;padding-bottom:.2rem;margin-top:2.5rem}
section{border:1px solid #dde;border-radius:6px;padding:.2rem 1rem;margin:1rem 0}
code,pre{font:13px ui-monospace,monospace;background:#f3f4f8;border-radius:4px}
code{padding:0 .25rem}pre{padding:.6rem;overflow-x:auto}
.method{font-weight:700;text-transform:uppercase;margin-right:.5rem}
table{border-collapse:collapse;width:100%}td,th{text-align:left;vertical-align:top;
padding:.2rem .5rem;border-bottom:1px solid #eef}
"""

_BOUNDS = (
    ("minimum", ">="),
    ("exclusiveMinimum", ">"),
    ("maximum", "<="),
    ("exclusiveMaximum", "<"),
    ("minLength", "length >="),
    ("maxLength", "length <="),
    ("minItems", "items >="),
    ("maxItems", "items <="),
)


def describe_schema(schema: dict[str, Any]) -> str:
    """A schema in a few words: its type (or the component it names), enum and bounds."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(describe_schema(s) for s in schema[key])
    kind = str(schema.get("type", "any"))
    if kind == "array" and isinstance(schema.get("items"), dict):
        kind = f"list of {describe_schema(schema['items'])}"
    words = [kind + (f" ({schema['format']})" if "format" in schema else "")]
    if "enum" in schema:
        words.append("one of " + ", ".join(json.dumps(v) for v in schema["enum"]))
    words += [f"{sign} {schema[key]}" for key, sign in _BOUNDS if key in schema]
    return "; ".join(words)


def _rows(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    if not rows:
        return ""
    top = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{top}</tr>{body}</table>"


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    parts = [
        f"<h3><span class=method>{escape(method)}</span><code>{escape(path)}</code></h3>",
        f"<p>{escape(op.get('summary', ''))}</p>",
    ]
    parameters = [
        (
            f"<code>{escape(p['name'])}</code>",
            escape(p.get("in", "")),
            escape(describe_schema(p.get("schema", {}))),
            escape(p.get("description", "") + (" (required)" if p.get("required") else "")),
        )
        for p in op.get("parameters", [])
    ]
    parts.append(_rows(("parameter", "in", "type", "meaning"), parameters))
    media = op.get("requestBody", {}).get("content", {}).get("application/json")
    if media:
        parts.append(f"<p>Body: {escape(describe_schema(media.get('schema', {})))}</p>")
        for example in media.get("examples", {}).values():
            parts.append(f"<pre>{escape(json.dumps(example.get('value'), indent=2))}</pre>")
    answers = [
        (escape(str(status)), escape(answer.get("description", "")))
        for status, answer in op.get("responses", {}).items()
    ]
    parts.append(_rows(("status", "when"), answers))
    return "<section>" + "".join(parts) + "</section>"


def _component(name: str, schema: dict[str, Any]) -> str:
    needed = set(schema.get("required", ()))
    fields = [
        (
            f"<code>{escape(field)}</code>" + (" *" if field in needed else ""),
            escape(describe_schema(spec)),
            escape(spec.get("description", "")),
        )
        for field, spec in schema.get("properties", {}).items()
    ]
    summary = escape(schema.get("description", "") or describe_schema(schema))
    return (
        f"<section id='{escape(name)}'><h3>{escape(name)}</h3><p>{summary}</p>"
        f"{_rows(('field (* required)', 'type', 'meaning'), fields)}</section>"
    )


def render(spec: dict[str, Any]) -> str:
    """The whole page for an OpenAPI document."""
    info = spec.get("info", {})
    title = escape(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    operations = [
        _operation(method, path, op)
        for path, item in spec.get("paths", {}).items()
        for method, op in item.items()
        if isinstance(op, dict)
    ]
    schemas = spec.get("components", {}).get("schemas", {})
    components = [_component(name, schemas[name]) for name in sorted(schemas)]
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{title}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{title}</h1>"
        f"<p>{escape(info.get('description', ''))}</p>"
        "<p>The machine-readable document: <a href='openapi.json'>openapi.json</a>.</p>"
        f"<h2>Operations</h2>{''.join(operations)}"
        f"<h2>Schemas</h2>{''.join(components)}</body></html>"
    )
