"""Human-readable output for the CLI: rich tables and traces (progress bars: progress.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from recalld.interfaces.describe import currency
from recalld.records import Hit, Memory, SearchResult, TimeRange

if TYPE_CHECKING:  # annotations only: the search output through a local server stays light
    from recalld.engine import Status
    from recalld.sources.status import SourceStatus

console = Console(highlight=False, emoji=False)  # memory text is shown as written


def _when(memory: Memory) -> str:
    return memory.reference_time.strftime("%Y-%m-%d %H:%M")


def print_search(result: SearchResult, explain: bool) -> None:
    span = _window_text(result.details.get("time_window"))
    anchor = result.details.get("anchor")
    if span and anchor:
        span += f" ({anchor['relation']} {anchor['event']!r}, dated by {anchor['dated_by']})"
    console.print(
        f"[bold]{len(result.hits)} hit(s)[/] for {result.query!r} "
        f"(mode {result.mode}, {result.query_type} query"
        f"{', asks for advice' if result.details.get('advice') else ''}{span}, "
        f"{result.took_ms:.1f} ms)"
    )
    if explain:
        stage_ms = result.details.get("stage_ms")
        if stage_ms:
            console.print(
                "[dim]stages: "
                + ", ".join(f"{stage} {ms:.1f}" for stage, ms in stage_ms.items())
                + " ms[/]"
            )
        for note in result.details.get("stages", ()):
            console.print(
                f"[cyan]{note['stage']}[/] {note['status']}: {escape(note['reason'])} "
                f"({note['calls']} calls, {note['cache_hits']} cache hits, "
                f"{note['latency_ms']:.1f} ms)"
            )
        for hit in result.hits:
            _print_explained(hit)
        _print_near_misses(result, explain)
        return
    table = Table()
    for name in ("#", "score", "when", "content", "id"):
        table.add_column(name, overflow="fold")
    for hit in result.hits:
        content = _short(hit.memory.content, 300) + _where(hit.memory) + _in_collection(hit)
        content += _stale(hit.memory)
        table.add_row(
            str(hit.rank),
            f"{hit.score:.4f}",
            _when(hit.memory) + _who(hit.memory),
            content,
            hit.memory.id,
        )
    console.print(table)
    _print_near_misses(result, explain)


def _print_near_misses(result: SearchResult, explain: bool) -> None:
    """The next candidates under the hits, each with why it lost."""
    if not result.near_misses:
        return
    console.print(f"\n[bold]{len(result.near_misses)} near miss(es)[/]")
    for hit in result.near_misses:
        if explain:
            _print_explained(hit, "lost because")
            continue
        why = "; ".join(hit.trace.filters) if hit.trace else ""
        console.print(f"#{hit.rank}  {hit.score:.4f}  [dim]{hit.memory.id}[/]  {escape(why)}")
        console.print(f"    {_short(hit.memory.content, 200)}", markup=False)


def _window_text(window: TimeRange | None) -> str:
    if window is None or (window.start is None and window.end is None):
        return ""
    if window.start is None:
        return f", time window before {window.end:%Y-%m-%d}"
    if window.end is None:
        return f", time window from {window.start:%Y-%m-%d}"
    return f", time window {window.start:%Y-%m-%d} .. {window.end:%Y-%m-%d}"


def _role(memory: Memory) -> str:
    """Who said a turn (its ``role``), when the content does not already begin with it."""
    role = memory.metadata.get("role")
    if not isinstance(role, str) or not role or memory.content.startswith(f"{role}:"):
        return ""
    return escape(role)


def _who(memory: Memory) -> str:
    role = _role(memory)
    return f"\n[dim]{role}[/]" if role else ""


def _stale(memory: Memory) -> str:
    """A memory that no longer holds says so (superseded by whom, or since when)."""
    state = currency(memory)
    return f"\n[dim]{escape(state)}[/]" if state else ""


def _where(memory: Memory) -> str:
    """Where an indexed chunk can be opened: its file and line range."""
    source = memory.source
    if source.kind != "file" or not source.path:
        return ""
    return f"\n[dim]{source.path}:{source.line_start}-{source.line_end}[/]"


def _in_collection(hit: Hit) -> str:
    """A collection's file: its ``NAME/PATH`` and the context lines that apply."""
    label = hit.collection
    if label is None:
        return ""
    lines = "".join(f"\n  {escape(line)}" for line in label.context)
    return f"\n[dim]{escape(label.name)}/{escape(label.path)}{lines}[/]"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def _print_explained(hit: Hit, verdict: str = "kept because") -> None:
    """One hit and its trace, one stage a line, in the order the pipeline ran; ``verdict``
    introduces the trace's filter reasons (``lost because`` for a near miss)."""
    memory = hit.memory
    console.print(
        f"\n[bold]#{hit.rank}[/]  score {hit.score:.4f}  [dim]{memory.id}  {_when(memory)}"
        f"{'  session ' + memory.session_id if memory.session_id else ''}"
        f"{'  ' + _role(memory) if _role(memory) else ''}[/]"
    )
    console.print(f"    {_short(memory.content, 400)}", markup=False)
    if currency(memory):
        console.print(f"    [dim]{escape(currency(memory) or '')}[/]")
    if memory.source.kind == "file" and memory.source.path:
        console.print(f"    [dim]{_where(memory).strip()}[/]")
    trace = hit.trace
    if trace is None:
        return
    channels = ", ".join(f"{c.channel} #{c.rank} (score {c.score:.3f})" for c in trace.channels)
    fusion = " + ".join(f"{name} {value:.4f}" for name, value in trace.fusion.items())
    factors = " ".join(f"x{value:.3f} {name}" for name, value in trace.adjustments.items())
    console.print(f"    [cyan]channels[/]     {channels or 'none'}")
    if trace.rerank:
        blend = trace.rerank
        console.print(f"    [cyan]fusion[/]       {fusion}")
        console.print(
            f"    [cyan]rerank[/]       fused #{blend['position']:.0f}: "
            f"{blend['retrieval_weight']:.2f} x {blend['retrieval']:.4f} + "
            f"{1 - blend['retrieval_weight']:.2f} x reranker "
            + (f"{blend['reranker']:.4f}" if "reranker" in blend else "(not scored: 0)")
            + f" = {trace.fused_score:.4f}"
        )
    else:
        console.print(f"    [cyan]fusion[/]       {fusion} = {trace.fused_score:.4f}")
    console.print(f"    [cyan]adjustments[/]  {factors or 'none'} -> {trace.final_score:.4f}")
    if trace.promises:
        console.print(f"    [cyan]promises[/]     {escape('; '.join(trace.promises))}")
    console.print(f"    [cyan]{verdict}[/] {escape('; '.join(trace.filters))}")
    if hit.related:
        console.print(f"    [cyan]same session[/] {len(hit.related)} more matching memories")


def print_memory(memory: Memory) -> None:
    table = Table(show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name in (
        "id",
        "content",
        "type",
        "event_time",
        "created_at",
        "updated_at",
        "last_accessed_at",
        "access_count",
        "priority",
        "pinned",
        "evergreen",
        "significance",
        "project",
        "scope",
        "session_id",
        "source",
        "tags",
        "entities",
        "metadata",
        "forgotten_at",
    ):
        table.add_row(name, str(getattr(memory, name)))
    console.print(table)


def print_memories(memories: Sequence[Memory]) -> None:
    table = Table()
    for name in ("id", "when", "type", "content"):
        table.add_column(name, overflow="fold")
    for m in memories:
        text = m.content if len(m.content) < 120 else m.content[:120] + " …"
        table.add_row(
            m.id, _when(m), m.type, text + (" [dim](forgotten)[/]" if m.forgotten_at else "")
        )
    console.print(table)
    console.print(f"{len(memories)} memor{'y' if len(memories) == 1 else 'ies'}")


def print_status(status: Status) -> None:
    s = status.store
    table = Table(show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    rows = [
        ("store", s.path),
        ("schema version", str(s.schema_version)),
        ("memories", str(s.memories)),
        ("forgotten", str(s.forgotten)),
        ("with vectors", str(s.with_vectors)),
        ("sessions", str(s.sessions)),
        ("by type", ", ".join(f"{k}: {v}" for k, v in s.by_type.items()) or "-"),
        ("size", f"{s.size_bytes / 1e6:.2f} MB"),
        ("embedder", status.embedder),
        ("vectors made by", s.fingerprint or "(none yet)"),
    ]
    if s.vector_index is not None:
        rows.append(
            (
                "vector index",
                {"own": "the tenant's own", "table": "the table's, shared"}.get(
                    s.vector_index, s.vector_index
                ),
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    if s.unfinished_migration:
        console.print(
            "[red]unfinished copy: a `recalld migrate` into this tenant was "
            "interrupted before it was verified; run it again to finish[/]"
        )
    for line in s.advice:
        console.print(f"[yellow]{escape(line)}[/]")
    if s.memories == 0:
        console.print(
            "[yellow]the store is empty: add memories with `recalld add` or `recalld import`[/]"
        )
    missing = s.memories + s.forgotten - s.with_vectors
    if missing > 0:
        console.print(f"[yellow]{missing} memories have no vector: run `recalld reindex`[/]")
    if status.sources is not None:
        print_sources(status.sources)


SHOWN_PATHS = 5
"""File lists in ``status`` are cut to this many names (``--json`` has them all)."""


def _paths(paths: Sequence[str]) -> str:
    more = f" … and {len(paths) - SHOWN_PATHS} more" if len(paths) > SHOWN_PATHS else ""
    return ", ".join(paths[:SHOWN_PATHS]) + more


def print_sources(src: SourceStatus) -> None:
    """Indexed workspaces; whatever is stale, pending or broken is said in colour."""
    console.print(
        f"[bold]indexed files[/]: {src.indexed} of {src.files} tracked, {src.chunks} chunks, "
        f"from {len(src.roots)} root(s): {_paths(list(src.roots))}"
    )
    if src.collections:
        console.print(f"[bold]collections[/]: {escape(', '.join(src.collections))}")
    if src.empty:
        console.print(
            "[bold red]the file index is EMPTY: no chunk is searchable; "
            "run `recalld index PATH` and read its warnings[/]"
        )
    notes = [
        ("pending (an index run did not finish)", src.pending),
        ("changed on disk since indexed", src.stale),
        ("not indexed yet", src.unindexed),
        ("deleted on disk, still indexed", src.missing),
        ("roots missing on disk", src.missing_roots),
    ]
    for label, paths in notes:
        if paths:
            console.print(f"[yellow]{len(paths)} file(s) {label}: {_paths(list(paths))}[/]")
    if src.needs_index:
        console.print("[yellow]run `recalld index` to bring the index up to date[/]")
    for problem in src.errors[:SHOWN_PATHS]:
        console.print(f"[red]not indexed: {problem.path}: {problem.message}[/]")
    if len(src.errors) > SHOWN_PATHS:
        console.print(f"[red]… and {len(src.errors) - SHOWN_PATHS} more files not indexed[/]")
