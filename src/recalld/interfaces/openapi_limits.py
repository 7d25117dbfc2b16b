"""The limits the OpenAPI document declares beyond what the request models' schemas say:
those that depend on the settings, and the caps of the list's query parameters (checked by
the request models, as in a body)."""

from __future__ import annotations

from typing import Any

from recalld.config import Settings
from recalld.records import MEMORY_TYPES
from recalld.request_limits import MAX_ID_CHARS, MAX_TAG_CHARS, MAX_TAGS, MAX_TYPES
from recalld.requests import ISO_MOMENT


def declare_limits(spec: dict[str, Any], settings: Settings) -> None:
    """Write into the document the limits that depend on the settings, and the dates the
    list's query parameters take (what :data:`~recalld.requests.Moment` declares in bodies)."""
    schemas = spec["components"]["schemas"]
    schemas["MemoryIn"]["properties"]["content"]["maxLength"] = settings.max_content_chars
    schemas["MemoryPatch"]["properties"]["content"]["maxLength"] = settings.max_content_chars
    schemas["AddMemories"]["properties"]["memories"]["maxItems"] = settings.http_max_batch
    for item in spec["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", ()):
                if parameter["name"] in ("since", "until"):
                    parameter["schema"] = {"anyOf": [ISO_MOMENT, {"type": "null"}]}
                if parameter["name"] == "type":
                    parameter["schema"]["items"] = {"enum": list(MEMORY_TYPES)}
                declare_parameter_limit(parameter)


def declare_parameter_limit(parameter: dict[str, Any]) -> None:
    """The caps of :mod:`recalld.request_limits` on a list query parameter (the request
    model checks them, as for a body's filters)."""
    name, schema = parameter["name"], parameter["schema"]
    if name in ("tag", "type"):
        schema["maxItems"] = MAX_TAGS if name == "tag" else MAX_TYPES
        if name == "tag":
            schema["items"]["maxLength"] = MAX_TAG_CHARS
    elif name in ("project", "scope", "session_id", "superseded_by", "memory_id"):
        for kind in schema.get("anyOf", [schema]):
            if kind.get("type") == "string":
                kind["maxLength"] = MAX_ID_CHARS
