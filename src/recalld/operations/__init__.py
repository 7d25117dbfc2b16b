"""What :class:`~recalld.engine.MemoryEngine` delegates to, one module per kind of work.

The engine keeps its public methods, their validation and the store's lifecycle; these
modules do the work, each given the store and the callables it needs (never the engine):
``writing`` adds, updates, supersedes and forgets; ``reading`` searches and builds context;
``files`` indexes, watches and imports files; ``status`` reports and re-embeds.
"""
