"""Request objects: what every interface (library, CLI, HTTP, MCP) turns its input into.

Each operation of the facade takes one of these (:meth:`recalld.MemoryEngine.execute`),
so input is checked in one place and the same bad input gets the same message whichever
door it came through. Build them with :func:`parse` (or the class's ``model_validate``
inside :func:`parse`): a :class:`pydantic.ValidationError` is turned into an
:class:`~recalld.errors.InvalidInputError` whose message :func:`describe_errors` writes.

The JSON shape of each request is its JSON schema (``SearchQuery.model_json_schema()``),
which is also what the HTTP API documents.

The models live by kind: :mod:`~recalld.requests.search` (search, context, list and their
filters), :mod:`~recalld.requests.memories` (add, update, supersede, get, forget),
:mod:`~recalld.requests.importing` (imports), :mod:`~recalld.requests.files` (indexed
files); :mod:`~recalld.requests.base` holds what they
share (dates, limits, error messages, :func:`parse`). Every name is importable from here.
"""

from __future__ import annotations

from recalld.records import IMPORT_FORMATS as IMPORT_FORMATS
from recalld.requests.base import (
    DATE_WORDS as DATE_WORDS,
    EARLIEST as EARLIEST,
    EXPECTED as EXPECTED,
    ISO_MOMENT as ISO_MOMENT,
    LATEST as LATEST,
    MAX_LIMIT as MAX_LIMIT,
    MAX_QUERY_CHARS as MAX_QUERY_CHARS,
    NOT_BLANK as NOT_BLANK,
    NOTHING_TO_CHANGE as NOTHING_TO_CHANGE,
    YEARS as YEARS,
    ImportFormat as ImportFormat,
    Moment as Moment,
    RequestModel as RequestModel,
    as_utc as as_utc,
    check_moment as check_moment,
    describe_errors as describe_errors,
    parse as parse,
    refuse_unstorable as refuse_unstorable,
)
from recalld.requests.files import (
    DEFAULT_FILE_BYTES as DEFAULT_FILE_BYTES,
    MAX_CONTEXT_CHARS as MAX_CONTEXT_CHARS,
    MAX_FILES as MAX_FILES,
    GetFiles as GetFiles,
    SetContext as SetContext,
)
from recalld.requests.importing import ImportRequest as ImportRequest
from recalld.requests.memories import (
    NOT_NULL as NOT_NULL,
    AddMemories as AddMemories,
    ForgetMemories as ForgetMemories,
    GetMemory as GetMemory,
    MemoryFields as MemoryFields,
    MemoryIn as MemoryIn,
    MemoryPatch as MemoryPatch,
    SupersedeMark as SupersedeMark,
    SupersedeMemory as SupersedeMemory,
    UpdateMemory as UpdateMemory,
)
from recalld.requests.search import (
    ContextQuery as ContextQuery,
    Filters as Filters,
    ListQuery as ListQuery,
    SearchQuery as SearchQuery,
)

Request = (
    SearchQuery
    | ContextQuery
    | ListQuery
    | AddMemories
    | UpdateMemory
    | GetMemory
    | ForgetMemories
    | ImportRequest
    | SupersedeMemory
    | GetFiles
)
"""Every request :meth:`MemoryEngine.execute` takes."""
