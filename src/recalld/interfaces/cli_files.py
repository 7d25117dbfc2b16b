"""``recalld get`` (a memory by id, or indexed files by path or glob) and ``recalld
collection`` (list, context, remove): thin adapters over the engine's file methods."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from recalld.errors import NotFoundError
from recalld.interfaces.cli import CONTEXT_SETTINGS, Ctx, emit_json, errors, pass_ctx

if TYPE_CHECKING:  # `recalld --help` lists this module's commands without loading pydantic
    from recalld.engine import MemoryEngine
    from recalld.records import FileSet, Memory

PATH_MARKS = frozenset("/~*?[")
"""A target holding one of these names files (a path or a glob), never a memory id."""


def _names_files(target: str) -> bool:
    """Whether ``target`` reads as a path or glob rather than a memory id."""
    return bool(PATH_MARKS & set(target))


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("target")
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Text shown over all files (default 65536); a file that does not fit is cut, and "
    "said to be.",
)
@pass_ctx
def get(obj: Ctx, target: str, max_bytes: int | None) -> None:
    """Show one memory by id, or indexed files by path or glob.

    TARGET is a memory id, or an indexed file: NAME/PATH (a file of collection NAME), a
    path inside one collection, an absolute path, or a glob of these ('notes/**/*.md',
    quoted; ** spans folders). Each file is shown with its collection and context lines,
    its text as indexed. A path that is no indexed file is an error (exit 3); a glob that
    matches nothing prints a note and exits 0, and one that matches very many files says
    how many it left out.
    """
    from recalld.records import Memory
    from recalld.requests import DEFAULT_FILE_BYTES

    max_bytes = max_bytes or DEFAULT_FILE_BYTES
    with errors(), obj.engine() as engine:
        found = _lookup(engine, target, max_bytes)
    if isinstance(found, Memory):
        _show_memory(obj, found)
        return
    if obj.as_json:
        emit_json(found)
        return
    for file in found.files:
        _show_file(file)
    for note in found.notes:
        click.echo(f"note: {note}", err=True)


def _lookup(engine: MemoryEngine, target: str, max_bytes: int) -> Memory | FileSet:
    """The memory ``target`` names, or the indexed files: a target that reads as an id is
    tried as one first, a path first as a file (an id may hold a ``/`` too)."""
    as_id = not _names_files(target)
    if as_id and (memory := _memory(engine, target)) is not None:
        return memory
    try:
        return engine.get_files(target, max_bytes=max_bytes)
    except NotFoundError:
        if not as_id and (memory := _memory(engine, target)) is not None:
            return memory
        if as_id:
            raise NotFoundError(
                f"no memory has id {target!r}, and no indexed file is named so (a file is "
                "NAME/PATH, a path inside a collection, or an absolute path)"
            ) from None
        raise


def _memory(engine: MemoryEngine, memory_id: str) -> Memory | None:
    try:
        return engine.get(memory_id)
    except NotFoundError:
        return None


def _show_memory(obj: Ctx, memory: Memory) -> None:
    if obj.as_json:
        emit_json(memory)
        return
    from recalld.interfaces.render import print_memory

    print_memory(memory)


def _show_file(file: object) -> None:
    from recalld.records import IndexedFile

    assert isinstance(file, IndexedFile)
    click.secho(f"== {file.path}", bold=True)
    if file.collection is not None:
        for line in file.collection.context:
            click.secho(f"   {line}", dim=True)
    if file.note:
        click.secho(f"   ({file.note})", fg="yellow")
    click.echo(file.text.rstrip("\n"))
    click.echo()


@click.group(context_settings=CONTEXT_SETTINGS)
def collection() -> None:
    """Named collections of indexed folders and their context lines.

    Make one with `recalld index PATH --name NAME [--context LINE]`; re-index it with
    `recalld index --name NAME`. A hit from a collection's file carries the collection's
    name and every context line that applies to the file (the collection's own, then each
    sub-path's that holds it, outermost first).
    """


@collection.command(name="list")
@pass_ctx
def list_(obj: Ctx) -> None:
    """The collections: folder, files, chunks and context lines."""
    with errors(), obj.engine() as engine:
        found = engine.collections()
    if obj.as_json:
        emit_json({"collections": found})
        return
    if not found:
        click.echo("no collection yet: recalld index PATH --name NAME")
    for item in found:
        click.secho(f"{item.name}", bold=True, nl=False)
        click.echo(f"  {item.path}  ({item.files} files, {item.chunks} chunks)")
        for prefix, line in sorted(item.contexts.items()):
            where = f"{item.name}/{prefix}" if prefix else item.name
            click.echo(f"  {where}: {line}")


@collection.command(name="context")
@click.argument("name")
@click.argument("text", required=False)
@click.option("--path", "sub_path", default="", help="A sub-path of the collection.")
@click.option("--remove", is_flag=True, help="Remove the line instead of setting it.")
@pass_ctx
def context_(obj: Ctx, name: str, text: str | None, sub_path: str, remove: bool) -> None:
    """Set the context line of collection NAME (or of --path inside it) to TEXT."""
    if remove == (text is not None):
        raise click.UsageError("give TEXT, or --remove (not both)")
    with errors(), obj.engine() as engine:
        found = engine.set_context(name, None if remove else text, path=sub_path)
    if obj.as_json:
        emit_json(found)
        return
    where = f"{name}/{sub_path.strip('/')}" if sub_path.strip("/") else name
    click.echo(f"{where}: " + ("context removed" if remove else str(text).strip()))


@collection.command(name="remove")
@click.argument("name")
@pass_ctx
def remove(obj: Ctx, name: str) -> None:
    """Forget collection NAME: its indexed files, their chunks and its context lines (the
    files on disk are not touched)."""
    with errors(), obj.engine() as engine:
        deleted = engine.remove_collection(name)
    if obj.as_json:
        emit_json({"removed": name, "chunks_deleted": deleted})
        return
    click.echo(f"removed collection {name} ({deleted} chunks deleted)")
