"""The typed records recalld passes around: memories, new memories, filters, hits, traces.

All records are frozen; derive variants with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

_Frozen = TypeVar("_Frozen")


def frozen_made(kind: type[_Frozen], /, **values: Any) -> _Frozen:
    """An instance of the frozen dataclass ``kind`` made without its ``__init__``, which
    sets each field through ``object.__setattr__`` (about twice the cost): for records made
    once per row or candidate of every search. The caller gives every field (a test per
    caller checks the set against ``dataclasses.fields``); the instance is as frozen as one
    made the usual way. The keyword arguments arrive in a dict of their own, which becomes
    the instance's ``__dict__`` as it is (copying it was a third of the cost)."""
    item = object.__new__(kind)
    object.__setattr__(item, "__dict__", values)
    return item


MemoryType = Literal["insight", "event", "raw", "turn", "chunk"]
MEMORY_TYPES: tuple[MemoryType, ...] = ("insight", "event", "raw", "turn", "chunk")
TYPE_ALIASES: Mapping[str, MemoryType] = {
    "fact": "insight",
    "preference": "insight",
    "decision": "insight",
    "lesson": "insight",
    "episode": "event",
    "message": "turn",
    "document": "chunk",
    "log": "raw",
}
"""The names people give kinds of memory ("store this fact, that preference"), and the type
each is stored as: accepted wherever a type is (add, update, filters), and stored under the
type's one name, so stores, filters and rankings stay as they were."""
TypeName = Literal[
    "insight",
    "event",
    "raw",
    "turn",
    "chunk",
    "fact",
    "preference",
    "decision",
    "lesson",
    "episode",
    "message",
    "document",
    "log",
]
"""A type or one of its :data:`TYPE_ALIASES` (what the adapters' schemas accept)."""
TYPES_ACCEPTED = (
    "insight, event, raw, turn or chunk (fact, preference, decision and lesson are stored as "
    "insight, episode as event, message as turn, document as chunk, log as raw)"
)
"""What the errors and the help say a type may be."""


def stored_type(name: object) -> object:
    """``name``'s stored type when it is an alias (:data:`TYPE_ALIASES`), else ``name``
    (a type, or something the caller's check refuses)."""
    return TYPE_ALIASES.get(name, name) if isinstance(name, str) else name


IMPORT_FORMATS: tuple[str, ...] = (
    "memories",
    "jsonl-transcript",
    "claude-code",
    "longmemeval",
    "locomo",
)
"""``memories``: JSONL, one memory object a line; the others are transcripts
(:mod:`recalld.sources.importer`)."""

SearchMode = Literal["vector", "hybrid", "auto"]
Granularity = Literal["memory", "session"]
SEARCH_MODES: tuple[SearchMode, ...] = ("vector", "hybrid", "auto")


@dataclass(frozen=True)
class Source:
    """Where a memory came from: a file and line range, a transcript, or a direct add."""

    kind: str = "direct"
    """``direct``, ``file``, ``transcript``, ``longmemeval``, ``locomo`` ..."""
    path: str | None = None
    line_start: int | None = None
    line_end: int | None = None
    ref: str | None = None
    """A free reference inside the source (a message id, a turn id such as ``D1:3``)."""


@dataclass(frozen=True)
class Memory:
    """One stored memory, as the store returns it."""

    id: str
    content: str
    type: MemoryType
    created_at: datetime
    updated_at: datetime
    content_hash: str
    event_time: datetime | None = None
    last_accessed_at: datetime | None = None
    access_count: int = 0
    priority: float = 1.0
    pinned: bool = False
    evergreen: bool = False
    """Evergreen memories (``MEMORY.md``, undated notes) never decay."""
    significance: float = 0.5
    project: str | None = None
    scope: str = "user"
    session_id: str | None = None
    source: Source = field(default_factory=Source)
    tags: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    valid_until: datetime | None = None
    superseded_by: str | None = None
    embedding_fingerprint: str | None = None
    forgotten_at: datetime | None = None
    embed_context: str | None = None
    """Text embedded together with the content but neither shown nor searched as words
    (e.g. the turn a reply answers): it gives the vector what an anaphoric turn lacks."""
    tells_event: bool | None = None
    """Whether the content tells of something that happened to its speaker
    (:func:`recalld.text.states_event`): computed from the content by the facade when the
    memory is written, and kept by the store; ``None`` when not known (it is then computed
    where it is needed)."""
    namespace: str | None = None
    """The namespace the memory belongs to: its tenant's own, or a shared one it was written
    to (set by the store; ``None`` on a memory that was not read from a store)."""
    position: int | None = None
    """The memory's place in its session, from 0 (the store gives a new memory of a session
    the place after the session's last when none is set); ``None`` without a session."""

    @property
    def embedding_text(self) -> str:
        """What the embedder sees: the context, if any, then the content."""
        return f"{self.embed_context}\n{self.content}" if self.embed_context else self.content

    @property
    def reference_time(self) -> datetime:
        """The time the memory is about: its event time, else when it was stored."""
        return self.event_time or self.created_at


@dataclass(frozen=True)
class NewMemory:
    """What a caller gives to store a memory; everything but ``content`` has a default."""

    content: str
    type: MemoryType = "event"
    event_time: datetime | None = None
    priority: float = 1.0
    pinned: bool = False
    evergreen: bool = False
    significance: float = 0.5
    project: str | None = None
    scope: str = "user"
    session_id: str | None = None
    source: Source = field(default_factory=Source)
    tags: tuple[str, ...] = ()
    entities: tuple[str, ...] | None = None
    """``None`` lets recalld extract entities from the content."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    """Give an id to make re-imports idempotent; ``None`` generates one."""
    embed_context: str | None = None
    """Embedded with the content, never shown or searched (see :class:`Memory`)."""
    namespace: str | None = None
    """A shared namespace the store's tenant is granted, to share the memory there;
    ``None`` keeps it in the tenant's own namespace."""


@dataclass(frozen=True)
class AddResult:
    """The outcome of one add: the stored id, and whether it matched an existing memory."""

    id: str
    created: bool
    duplicate_of: str | None = None
    """Set when identical content already existed in the same scope, project and session."""
    embedding_windows: int = 1
    """How many 256-token windows the embedding averaged (1 for text that fits)."""


@dataclass(frozen=True)
class TimeRange:
    """A half-open time window ``[start, end)``; either side may be open."""

    start: datetime | None = None
    end: datetime | None = None

    def contains(self, moment: datetime) -> bool:
        return (self.start is None or moment >= self.start) and (
            self.end is None or moment < self.end
        )


@dataclass(frozen=True)
class MemoryFilter:
    """Restrictions applied before ranking; every field is optional."""

    project: str | None = None
    scope: str | None = None
    types: tuple[MemoryType, ...] = ()
    tags: tuple[str, ...] = ()
    """A memory must carry all of these tags."""
    session_id: str | None = None
    superseded_by: str | None = None
    """Only the memories this id supersedes."""
    time_range: TimeRange | None = None
    """Applies to the memory's reference time (event time, else creation time)."""
    include_forgotten: bool = False
    include_superseded: bool = True


@dataclass(frozen=True)
class ChannelHit:
    """A memory's place in one channel's candidate list."""

    channel: str
    rank: int
    """1-based."""
    score: float
    """The channel's raw score (cosine, BM25 as 0-1, entity overlap, recency ...)."""


@dataclass(frozen=True)
class Trace:
    """Why a hit is where it is; computed in the same pass as its score."""

    channels: tuple[ChannelHit, ...] = ()
    fusion: Mapping[str, float] = field(default_factory=dict)
    """Each fused list's contribution to the fused score, bonus included."""
    fused_score: float = 0.0
    rerank: Mapping[str, float] = field(default_factory=dict)
    """The rerank blend when a reranker ran (``fused_score`` is then the blend): fused
    position, retrieval weight, ``1 / position``, the reranker's score, the blend."""
    adjustments: Mapping[str, float] = field(default_factory=dict)
    """Each score adjustment's multiplicative factor (1.0 = no effect)."""
    filters: tuple[str, ...] = ()
    """Why the hit survived the filters (for a near miss: why it lost)."""
    final_score: float = 0.0
    promises: tuple[str, ...] = ()
    """What the user's own statements did to the hit, each with why: a memory replaced
    (``supersede``) placed under the memory that replaces it, a replacement lifted to the
    replaced memory's place or brought in beside it. These are rules, not factors: the
    factors they set are in ``adjustments`` too."""


@dataclass(frozen=True)
class Hit:
    """One search result."""

    memory: Memory
    score: float
    rank: int
    trace: Trace | None = None
    related: tuple[Memory, ...] = ()
    """With session granularity: the session's other matching memories, best first."""
    collection: InCollection | None = None
    """For a chunk of a file in a named collection: the collection, the file's path in it
    and the context lines that apply (``recalld index PATH --name NAME``)."""


@dataclass(frozen=True)
class InCollection:
    """Where an indexed file sits: its collection, its path there, and the collection's
    context lines that apply to it."""

    name: str
    path: str
    """The file's path inside the collection's folder (``/``-separated)."""
    context: tuple[str, ...] = ()
    """Every context line that applies, the collection's own first, then each sub-path's
    that holds the file, outermost to innermost."""


@dataclass(frozen=True)
class Collection:
    """A named folder of indexed files, with its context lines."""

    name: str
    path: str
    """The folder (or file) indexed, absolute."""
    globs: tuple[str, ...]
    contexts: Mapping[str, str] = field(default_factory=dict)
    """Context lines by sub-path (``""`` is the collection's own line)."""
    files: int = 0
    chunks: int = 0
    indexed_at: datetime | None = None


@dataclass(frozen=True)
class IndexedFile:
    """One indexed file's text, as it was when its chunks were made."""

    path: str
    """``collection/path`` for a file of a named collection, else its absolute path."""
    source_path: str
    """The absolute path it was indexed from."""
    collection: InCollection | None
    text: str
    """The indexed text, cut at ``max_bytes`` (at a line end when one is near)."""
    bytes: int
    """The whole text's size in UTF-8 bytes."""
    truncated: bool = False
    chunks: int = 0
    indexed_at: datetime | None = None
    note: str | None = None
    """Why the text is cut or missing, when it is."""


@dataclass(frozen=True)
class FileSet:
    """The indexed files a path or glob names, by path."""

    pattern: str
    files: tuple[IndexedFile, ...]
    notes: tuple[str, ...] = ()
    """What the answer leaves out and why (a glob that matched nothing, texts cut to fit)."""


@dataclass(frozen=True)
class SearchResult:
    """The ranked hits of a search and how the query was understood."""

    query: str
    hits: tuple[Hit, ...]
    mode: SearchMode
    query_type: str
    took_ms: float
    details: Mapping[str, Any] = field(default_factory=dict)
    near_misses: tuple[Hit, ...] = ()
    """When asked for: the next candidates below the hits, ranked on from the last hit,
    each traced, its trace's ``filters`` saying why it lost."""


@dataclass(frozen=True)
class Context:
    """Prompt-ready text made of the best hits that fit a token budget."""

    text: str
    hits: tuple[Hit, ...]
    tokens: int
    budget: int


@dataclass(frozen=True)
class ApiKey:
    """An HTTP API key as the store keeps it (the secret itself is never stored, only its
    SHA-256); see :mod:`recalld.keys`."""

    id: str
    """The public part of the key (``rk_<id>_<secret>``), used to find and revoke it."""
    tenant: str
    """Every request made with the key is confined to this tenant's memories ..."""
    shared: tuple[str, ...] = ()
    """... and these shared namespaces (read and write)."""
    admin: bool = False
    """Admin keys may also index server-side folders (``POST /v1/index``)."""
    label: str | None = None
    created_at: datetime | None = None
    revoked_at: datetime | None = None


IndexKind = Literal["vectors", "words"]
"""An index a store builds for one tenant on demand
(:class:`recalld.stores.base.IndexBuilding`): ``vectors`` a vector index of the tenant's own
rows, ``words`` word postings for its word channel."""


@dataclass(frozen=True)
class IndexBuild:
    """What :meth:`recalld.stores.base.IndexBuilding.build_index` did."""

    kind: IndexKind
    name: str
    """The index built or dropped (an index name, or the postings' table)."""
    dropped: bool
    entries: int | None = None
    """Entries written (word postings), when the build counts them."""
