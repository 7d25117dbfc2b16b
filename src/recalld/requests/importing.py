"""The request that imports a file of memories or a transcript."""

from __future__ import annotations

from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from recalld.records import (
    IMPORT_FORMATS,
)
from recalld.request_limits import (
    MAX_EMBED_CHARS,
    check_embed_chars,
)
from recalld.requests.base import ImportFormat, RequestModel


class ImportRequest(RequestModel):
    """Import a file's memories or a transcript (:meth:`MemoryEngine.run_import`): one
    entry point for every format. Give ``path`` (a file the process can read, ``.gz``
    fine) or ``content`` (the file's bytes or text)."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [  # a path or the content, not both
                {
                    "required": ["path"],
                    "properties": {"path": {"type": "string"}, "content": {"type": "null"}},
                },
                {
                    "required": ["content"],
                    "properties": {"content": {"type": "string"}, "path": {"type": "null"}},
                },
            ]
        },
    )

    format: ImportFormat = "memories"
    path: str | None = None
    content: bytes | None = Field(default=None, json_schema_extra={"maxLength": MAX_EMBED_CHARS})
    """The file's text (at most 1,000,000 characters; larger files: import by ``path``)."""
    strict: bool = False
    """Refuse the whole input, storing nothing, when any line is bad; by default bad lines
    are reported by number and skipped, and the rest stored."""

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        if value not in IMPORT_FORMATS:
            raise ValueError(f"format must be one of {', '.join(IMPORT_FORMATS)}")
        return value

    @field_validator("content", mode="before")
    @classmethod
    def _bytes(cls, value: Any) -> Any:
        return value.encode("utf-8") if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_source(self) -> ImportRequest:
        if (self.path is None) == (self.content is None):
            raise ValueError("give either a path or the content to import, not both")
        if self.content is not None:
            check_embed_chars(len(self.content), "the content to import")
        return self
