"""Numbered, named schema migrations of the PostgreSQL store, recorded in
``recalld_migrations``; each runs in its own transaction and is idempotent.

The tenant column (``namespace``) leads every index that serves a tenant's search, and
Row-Level Security confines every row to the namespaces the session declares
(``recalld.namespaces``): a second wall behind the store's own ``WHERE`` clauses. RLS does
not bind superusers (nor roles with ``BYPASSRLS``); connect as an ordinary role for it.
"""

from __future__ import annotations

from typing import Any

APP_ID = "recalld"
TEXT_SEARCH_CONFIG = "english"
"""The ``words`` column of migrations 1-3 (dropped by migration 4 for FTS5's tokens)."""


def m001_initial(cur: Any) -> None:
    """Memories (vectors, words and entities in the row) and the store's key/value facts."""
    cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
    cur.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    cur.execute(
        "CREATE TABLE IF NOT EXISTS recalld_meta (key text PRIMARY KEY, value text NOT NULL)"
    )
    cur.execute(
        f"""
        CREATE TABLE IF NOT EXISTS memories (
            pk bigserial PRIMARY KEY,
            namespace text NOT NULL,
            id text NOT NULL,
            content text NOT NULL,
            type text NOT NULL,
            content_hash text NOT NULL,
            event_time double precision,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            last_accessed_at double precision,
            ref_time double precision NOT NULL,
            access_count integer NOT NULL DEFAULT 0,
            priority double precision NOT NULL DEFAULT 1.0,
            pinned boolean NOT NULL DEFAULT false,
            evergreen boolean NOT NULL DEFAULT false,
            significance double precision NOT NULL DEFAULT 0.5,
            project text,
            scope text NOT NULL DEFAULT 'user',
            session_id text,
            position integer,
            source_kind text NOT NULL DEFAULT 'direct',
            source_path text,
            source_start integer,
            source_end integer,
            source_ref text,
            tags text[] NOT NULL DEFAULT '{{}}',
            entities text[] NOT NULL DEFAULT '{{}}',
            metadata jsonb NOT NULL DEFAULT '{{}}',
            valid_until double precision,
            superseded_by text,
            embedding_fingerprint text,
            forgotten_at double precision,
            embed_context text,
            tells_event boolean,
            embedding vector,
            words tsvector GENERATED ALWAYS AS
                (to_tsvector('{TEXT_SEARCH_CONFIG}', content)) STORED,
            UNIQUE (namespace, id)
        )
        """
    )
    for statement in (
        "CREATE INDEX IF NOT EXISTS memories_words ON memories USING gin (words)",
        "CREATE INDEX IF NOT EXISTS memories_trigram ON memories USING gin (content gin_trgm_ops)",
        "CREATE INDEX IF NOT EXISTS memories_entities ON memories USING gin (entities)",
        "CREATE INDEX IF NOT EXISTS memories_ns_ref_time ON memories (namespace, ref_time)",
        "CREATE INDEX IF NOT EXISTS memories_ns_accessed ON memories (namespace, last_accessed_at)",
        "CREATE INDEX IF NOT EXISTS memories_ns_session"
        " ON memories (namespace, session_id, position)",
        "CREATE INDEX IF NOT EXISTS memories_ns_hash ON memories (namespace, content_hash)",
        "CREATE INDEX IF NOT EXISTS memories_forgotten ON memories (namespace)"
        " WHERE forgotten_at IS NOT NULL",
    ):
        cur.execute(statement)
    _tenant_wall(cur, "memories", writes=True)


_IN_NAMESPACES = (
    "coalesce(namespace = ANY ((SELECT string_to_array("
    "current_setting('recalld.namespaces', true), ','))::text[]), false)"
)
"""The wall (migration 11's form): the row's namespace is one the session declares. The
list is read once a statement (a sub-select), and the test is wrapped so that the planner
does not estimate it from the namespace's statistics: it multiplied them into the store's
own ``namespace =`` clause's, so a tenant of 901 rows among 1M was planned as one row
(nested loops that read its rows 37 times: 40 ms of server CPU a search against 12 for a
superuser) and the tenant of 100k as 10k (446 ms against 50)."""


def _tenant_wall(cur: Any, table: str, writes: bool) -> None:
    """Row-Level Security on ``table``, forced on its owner too: a row is seen only when its
    namespace is one the session declares (``recalld.namespaces``), and with ``writes``
    may be written only so."""
    cur.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    cur.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
    cur.execute(f"DROP POLICY IF EXISTS tenant_wall ON {table}")
    check = f" WITH CHECK ({_IN_NAMESPACES})" if writes else ""
    cur.execute(f"CREATE POLICY tenant_wall ON {table} USING ({_IN_NAMESPACES}){check}")


def m002_sources(cur: Any) -> None:
    """Indexed roots and files, per namespace, behind the same wall."""
    cur.execute(
        """
        CREATE TABLE IF NOT EXISTS source_roots (
            namespace text NOT NULL,
            path text NOT NULL,
            globs text NOT NULL,
            added_at double precision NOT NULL,
            indexed_at double precision,
            PRIMARY KEY (namespace, path)
        )
        """
    )
    cur.execute(
        """
        CREATE TABLE IF NOT EXISTS source_files (
            namespace text NOT NULL,
            path text NOT NULL,
            root text NOT NULL,
            size bigint NOT NULL,
            mtime_ns bigint NOT NULL,
            status text NOT NULL CHECK (status IN ('pending', 'indexed', 'error')),
            content_hash text,
            chunker text,
            error text,
            indexed_at double precision,
            PRIMARY KEY (namespace, path)
        )
        """
    )
    cur.execute("CREATE INDEX IF NOT EXISTS source_files_root ON source_files (namespace, root)")
    cur.execute(
        "CREATE INDEX IF NOT EXISTS memories_ns_source"
        " ON memories (namespace, source_kind, source_path)"
    )
    for table in ("source_roots", "source_files"):
        _tenant_wall(cur, table, writes=False)


def m003_api_keys(cur: Any) -> None:
    """HTTP API keys: a key's SHA-256 (never the key), its tenant and shared namespaces.
    Keys name their tenant, so the table is read across tenants (no tenant wall)."""
    cur.execute(
        """
        CREATE TABLE IF NOT EXISTS api_keys (
            id text PRIMARY KEY,
            secret_hash text NOT NULL,
            tenant text NOT NULL,
            shared text[] NOT NULL DEFAULT '{}',
            admin boolean NOT NULL DEFAULT false,
            label text,
            created_at double precision NOT NULL,
            revoked_at double precision
        )
        """
    )


LEXICAL_STATS_COMPACT = 64
"""Every this many statements that change the word statistics, their delta rows are
summed into one (so a search sums a few rows, and writers never wait on one hot row)."""


def m004_fts5_words(cur: Any) -> None:
    """FTS5's words and BM25 statistics, so that the word channel ranks as SQLite's does
    (see :mod:`recalld.lexical`): each row's FTS5 tokens in order (``lex_tokens``, GIN for
    matching) and their count (``lex_length``); the table's row and token totals kept by
    statement-level triggers as delta rows in ``lexical_stats`` (over every row, other
    tenants' and forgotten ones included, as FTS5's own statistics are). Existing rows are
    tokenized here; the english ``words`` column it replaces is dropped."""
    from recalld.lexical import tokenize_many

    cur.execute(
        "ALTER TABLE memories ADD COLUMN IF NOT EXISTS lex_tokens text[] NOT NULL DEFAULT '{}'"
    )
    cur.execute(
        "ALTER TABLE memories ADD COLUMN IF NOT EXISTS lex_length integer NOT NULL DEFAULT 0"
    )
    # The owner fills every tenant's rows: lift the forced wall for this transaction only.
    cur.execute("ALTER TABLE memories NO FORCE ROW LEVEL SECURITY")
    last = 0
    for _ in range(1 << 40):  # bounded by the table's size
        cur.execute(
            "SELECT pk, content FROM memories WHERE pk > %s ORDER BY pk LIMIT 2000", (last,)
        )
        rows = cur.fetchall()
        if not rows:
            break
        tokens = tokenize_many([r[1] for r in rows])
        cur.executemany(
            "UPDATE memories SET lex_tokens = %s, lex_length = %s WHERE pk = %s",
            [(t, len(t), r[0]) for r, t in zip(rows, tokens, strict=True)],
        )
        last = rows[-1][0]
    cur.execute("ALTER TABLE memories FORCE ROW LEVEL SECURITY")
    cur.execute("DROP INDEX IF EXISTS memories_words")
    cur.execute("ALTER TABLE memories DROP COLUMN IF EXISTS words")
    cur.execute("CREATE INDEX IF NOT EXISTS memories_lex ON memories USING gin (lex_tokens)")
    cur.execute(
        "CREATE TABLE IF NOT EXISTS lexical_stats (id bigserial PRIMARY KEY,"
        " rows bigint NOT NULL, tokens bigint NOT NULL)"
    )
    cur.execute("DELETE FROM lexical_stats")
    cur.execute("ALTER TABLE memories NO FORCE ROW LEVEL SECURITY")
    cur.execute(
        "INSERT INTO lexical_stats (rows, tokens)"
        " SELECT count(*), coalesce(sum(lex_length), 0) FROM memories"
    )
    cur.execute("ALTER TABLE memories FORCE ROW LEVEL SECURITY")
    cur.execute(
        f"""
        CREATE OR REPLACE FUNCTION recalld_lexical_stats() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            d_rows bigint := 0;
            d_tokens bigint := 0;
            added bigint;
        BEGIN
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                SELECT d_rows + count(*), d_tokens + coalesce(sum(lex_length), 0)
                    INTO d_rows, d_tokens FROM new_rows;
            END IF;
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                SELECT d_rows - count(*), d_tokens - coalesce(sum(lex_length), 0)
                    INTO d_rows, d_tokens FROM old_rows;
            END IF;
            IF d_rows = 0 AND d_tokens = 0 THEN
                RETURN NULL;
            END IF;
            INSERT INTO lexical_stats (rows, tokens) VALUES (d_rows, d_tokens)
                RETURNING id INTO added;
            IF added % {LEXICAL_STATS_COMPACT} = 0
                    AND pg_try_advisory_xact_lock(hashtext('recalld_lexical_stats')) THEN
                WITH gone AS (DELETE FROM lexical_stats RETURNING rows, tokens)
                INSERT INTO lexical_stats (rows, tokens)
                    SELECT coalesce(sum(rows), 0), coalesce(sum(tokens), 0) FROM gone;
            END IF;
            RETURN NULL;
        END $$
        """
    )
    for event, tables in (
        ("INSERT", "NEW TABLE AS new_rows"),
        ("DELETE", "OLD TABLE AS old_rows"),
        ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
    ):
        name = f"memories_lexical_{event.lower()}"
        cur.execute(f"DROP TRIGGER IF EXISTS {name} ON memories")
        cur.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON memories REFERENCING {tables}"
            " FOR EACH STATEMENT EXECUTE FUNCTION recalld_lexical_stats()"
        )


LEX_ROWS_COLUMNS = (
    "pk, id, namespace, ref_time, forgotten_at, superseded_by, project, scope, session_id,"
    " type, tags, lex_length, lex_tokens"
)
"""What :func:`m005_lex_rows`'s function returns of a row: the word channel's inputs and
every column a search filter reads (``queries.filter_sql``)."""


def _lex_rows_function(arguments: str, rows: str, name: str = "recalld_lex_rows") -> str:
    """``CREATE OR REPLACE FUNCTION name(arguments)``: the columns of
    :data:`LEX_ROWS_COLUMNS` of the rows ``rows`` (a FROM clause) gives, planned with
    sequential scans off (see :func:`m005_lex_rows`)."""
    columns = ", ".join(f"m.{c.strip()}" for c in LEX_ROWS_COLUMNS.split(","))
    return f"""
        CREATE OR REPLACE FUNCTION {name}({arguments}) RETURNS TABLE (
            pk bigint, id text, namespace text, ref_time double precision,
            forgotten_at double precision, superseded_by text, project text, scope text,
            session_id text, type text, tags text[], lex_length integer, lex_tokens text[])
        LANGUAGE sql STABLE
        SET enable_seqscan = off SET work_mem = '64MB'
        AS $$ SELECT {columns} {rows} $$
        """


def m005_lex_rows(cur: Any) -> None:
    """``recalld_lex_rows(tokens)``: the rows holding any of ``tokens``, read through the
    ``lex_tokens`` GIN index. The planner prefers a sequential scan once a query word is
    common (a fifth of the rows), but testing ``&&`` on every row costs about 3.5 us (350 ms
    at 100k rows) where the index reads the same rows in about 15 ms, so the function plans
    its one statement with sequential scans off and room for an exact bitmap (a function's
    ``SET`` binds only its own statement; Row-Level Security applies inside as outside)."""
    cur.execute(_lex_rows_function("text[]", "FROM memories m WHERE m.lex_tokens && $1"))


def m006_tenant_words(cur: Any) -> None:
    """A tenant's word channel reads and counts only the namespaces its search may see.

    - ``recalld_lex_keys(namespace, tokens)`` is a row's tokens plus one key for its
      namespace (a control character no FTS5 token holds, then the name); a GIN index on it
      replaces the one on the tokens alone. ``recalld_lex_rows(token, namespaces)`` asks it
      for the rows holding both the token and a namespace's key: GIN's scan of two
      required keys skips through the long list of a common word using the short one of a
      small tenant, so a tenant's word reads cost what its own rows cost, not the table's.
    - ``lexical_stats`` keeps its delta rows per namespace, so that N and the mean length
      are the visible namespaces' too: BM25 over a tenant's own memories, which another
      tenant's words can neither read nor shift (before, the rows counted were the visible
      ones only under Row-Level Security, and N was always the table's).
    """
    cur.execute(
        "CREATE OR REPLACE FUNCTION recalld_lex_keys(namespace text, tokens text[])"
        " RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE"
        " AS $$ SELECT array_append(tokens, E'\\x01' || namespace) $$"
    )
    cur.execute(
        "CREATE INDEX IF NOT EXISTS memories_ns_lex ON memories"
        " USING gin (recalld_lex_keys(namespace, lex_tokens))"
    )
    cur.execute("DROP INDEX IF EXISTS memories_lex")
    cur.execute("DROP FUNCTION IF EXISTS recalld_lex_rows(text[])")
    cur.execute(
        _lex_rows_function(
            "token text, namespaces text[]",
            "FROM unnest($2) AS v(ns) CROSS JOIN LATERAL (SELECT * FROM memories m"
            " WHERE recalld_lex_keys(m.namespace, m.lex_tokens) @> ARRAY[$1, E'\\x01' || v.ns]) m",
        )
    )
    cur.execute(
        "ALTER TABLE lexical_stats ADD COLUMN IF NOT EXISTS namespace text NOT NULL DEFAULT ''"
    )
    cur.execute("DELETE FROM lexical_stats")
    cur.execute("ALTER TABLE memories NO FORCE ROW LEVEL SECURITY")  # every tenant's rows
    cur.execute(
        "INSERT INTO lexical_stats (namespace, rows, tokens) SELECT namespace, count(*),"
        " coalesce(sum(lex_length), 0) FROM memories GROUP BY namespace"
    )
    cur.execute("ALTER TABLE memories FORCE ROW LEVEL SECURITY")
    cur.execute("CREATE INDEX IF NOT EXISTS lexical_stats_ns ON lexical_stats (namespace)")
    added = "SELECT namespace, count(*) AS r, coalesce(sum(lex_length), 0) AS t FROM new_rows"
    gone = "SELECT namespace, -count(*) AS r, -coalesce(sum(lex_length), 0) AS t FROM old_rows"
    for event, deltas in (
        ("insert", f"{added} GROUP BY namespace"),
        ("delete", f"{gone} GROUP BY namespace"),
        ("update", f"{added} GROUP BY namespace UNION ALL {gone} GROUP BY namespace"),
    ):
        cur.execute(
            f"""
            CREATE OR REPLACE FUNCTION recalld_lexical_stats_{event}() RETURNS trigger
            LANGUAGE plpgsql AS $$
            DECLARE
                spaces text[];
                counts bigint[];
                sizes bigint[];
                written bigint;
                last bigint;
            BEGIN
                -- The deltas, aggregated once; a statement that changed nothing writes
                -- nothing (and needs no right to write here).
                SELECT array_agg(namespace), array_agg(r), array_agg(t)
                    INTO spaces, counts, sizes
                    FROM (SELECT namespace, sum(r) AS r, sum(t) AS t FROM ({deltas}) d
                          GROUP BY namespace HAVING sum(r) <> 0 OR sum(t) <> 0) changed;
                IF spaces IS NULL THEN
                    RETURN NULL;
                END IF;
                INSERT INTO lexical_stats (namespace, rows, tokens)
                    SELECT * FROM unnest(spaces, counts, sizes);
                written := cardinality(spaces);
                last := currval(pg_get_serial_sequence('lexical_stats', 'id'));
                IF last / {LEXICAL_STATS_COMPACT} <> (last - written) / {LEXICAL_STATS_COMPACT}
                        AND pg_try_advisory_xact_lock(hashtext('recalld_lexical_stats')) THEN
                    WITH gone AS (DELETE FROM lexical_stats RETURNING namespace, rows, tokens)
                    INSERT INTO lexical_stats (namespace, rows, tokens)
                        SELECT namespace, sum(rows), sum(tokens) FROM gone GROUP BY namespace;
                END IF;
                RETURN NULL;
            END $$
            """
        )
        name = f"memories_lexical_{event}"
        tables = {
            "insert": "NEW TABLE AS new_rows",
            "delete": "OLD TABLE AS old_rows",
            "update": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
        }[event]
        cur.execute(f"DROP TRIGGER IF EXISTS {name} ON memories")
        cur.execute(
            f"CREATE TRIGGER {name} AFTER {event.upper()} ON memories REFERENCING {tables}"
            f" FOR EACH STATEMENT EXECUTE FUNCTION recalld_lexical_stats_{event}()"
        )
    cur.execute("DROP FUNCTION IF EXISTS recalld_lexical_stats()")


def m007_tenant_keys(cur: Any) -> None:
    """Every key of a tenant's rows leads with its namespace: the column a cluster that
    spreads tenants over servers distributes on (Citus requires it in every unique key of a
    distributed table). ``memories`` is keyed by ``(namespace, pk)`` and ``lexical_stats`` by
    ``(namespace, id)``; reads by pk alone keep an index of their own (``pk`` stays unique,
    given by its sequence). ``recalld_meta`` and ``api_keys`` hold no tenant's rows."""
    cur.execute("ALTER TABLE memories DROP CONSTRAINT IF EXISTS memories_pkey")
    cur.execute("ALTER TABLE memories ADD PRIMARY KEY (namespace, pk)")
    cur.execute("CREATE INDEX IF NOT EXISTS memories_by_pk ON memories (pk)")
    cur.execute("ALTER TABLE lexical_stats DROP CONSTRAINT IF EXISTS lexical_stats_pkey")
    cur.execute("ALTER TABLE lexical_stats ADD PRIMARY KEY (namespace, id)")


def m008_inline_vectors(cur: Any) -> None:
    """A memory's row keeps its vector and its words, not TOAST. PostgreSQL moves values
    out of a row past 2 kB, and a 384-dimension vector is 1.5 kB: with the content, its
    tokens and the metadata a memory is about 2.6 kB, so pgvector's default (``EXTERNAL``)
    moved every vector to TOAST, and reading one was a TOAST index lookup and a chunk fetch,
    about 9 buffer reads instead of 1 (an exact search over a tenant's 900 memories: 9 ms,
    3 ms inline). Rows now stay whole up to 8 kB (``toast_tuple_target``), so the word
    channel's tokens stay in the row too; past that, the text goes to TOAST before the
    vector (``MAIN``). Only rows written from now on change; ``VACUUM FULL memories``
    rewrites the old ones (it locks the table and rebuilds its indexes, so it is left to
    the operator: docs/postgres.md)."""
    cur.execute(f"ALTER TABLE memories {KEEP_VECTORS_INLINE}")
    cur.execute(f"ALTER TABLE memories SET (toast_tuple_target = {WHOLE_ROW_BYTES})")


def m009_word_postings(cur: Any) -> None:
    """A tenant's word postings, the word channel's index (see ``word_sql.top_words_ctes``),
    kept only for the namespaces listed in ``word_namespaces`` (``recalld postgres
    word-index`` lists one and fills its postings).

    ``word_postings`` holds one row per (memory, distinct token): the token's count in the
    row (``tf``) and the row's length (``dl``), so that an index of (namespace, token, pk)
    holding both gives a token's rows, its count in each and each row's length without
    reading the table. Statement-level triggers keep the postings of listed namespaces in
    step with ``memories`` in the writing transaction itself, as the tables' owner (a role
    that may write memories needs no grant on these; the tenant wall still binds, being
    forced on the owner too): inserted rows add theirs, deleted rows remove theirs, an
    update that changes a row's tokens replaces them (forgotten rows keep theirs, as FTS5
    keeps them). Both tables are behind the tenant wall. ``recalld_words_listed(namespace)``
    refuses (:data:`WORDS_GONE`) once a namespace's postings are dropped.
    ``recalld_lex_rows_all(tokens, namespaces)`` reads the rows holding every one of
    ``tokens`` (a phrase's) as ``recalld_lex_rows`` reads a token's."""
    cur.execute(
        _lex_rows_function(
            "tokens text[], namespaces text[]",
            "FROM unnest($2) AS v(ns) CROSS JOIN LATERAL (SELECT * FROM memories m WHERE"
            " recalld_lex_keys(m.namespace, m.lex_tokens) @> array_append($1, E'\\x01' || v.ns)) m",
            "recalld_lex_rows_all",
        )
    )
    cur.execute("CREATE TABLE IF NOT EXISTS word_namespaces (namespace text PRIMARY KEY)")
    cur.execute(
        f"""
        CREATE OR REPLACE FUNCTION recalld_words_listed(ns text) RETURNS boolean
        LANGUAGE plpgsql STABLE AS $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM word_namespaces WHERE namespace = ns) THEN
                RAISE EXCEPTION 'the word postings of % were dropped', ns
                    USING ERRCODE = '{WORDS_GONE}';
            END IF;
            RETURN true;
        END $$
        """
    )
    cur.execute(
        "CREATE TABLE IF NOT EXISTS word_postings (namespace text NOT NULL, token text NOT NULL,"
        " pk bigint NOT NULL, tf integer NOT NULL, dl integer NOT NULL)"
    )
    cur.execute(
        "CREATE INDEX IF NOT EXISTS word_postings_token ON word_postings"
        " (namespace, token, pk) INCLUDE (tf, dl)"
    )
    cur.execute("CREATE INDEX IF NOT EXISTS word_postings_row ON word_postings (namespace, pk)")
    for table in ("word_namespaces", "word_postings"):
        _tenant_wall(cur, table, writes=True)
    remove = (
        "DELETE FROM word_postings p USING gone WHERE p.namespace = gone.namespace"
        " AND p.pk = gone.pk"
    )
    bodies = {
        "insert": f"INSERT INTO word_postings {postings_sql('new_rows')};",
        "delete": f"WITH gone AS (SELECT namespace, pk FROM old_rows) {remove};",
        # Only rows whose tokens changed (an access count's update changes none); the
        # DELETE in WITH runs whether or not the INSERT reads it.
        "update": (
            "WITH changed AS (SELECT n.* FROM new_rows n JOIN old_rows o ON o.pk = n.pk"
            " WHERE o.lex_tokens IS DISTINCT FROM n.lex_tokens"
            " OR o.namespace IS DISTINCT FROM n.namespace),"
            " gone AS (SELECT o.namespace, o.pk FROM old_rows o JOIN changed c ON c.pk = o.pk),"
            f" dropped AS ({remove})"
            f" INSERT INTO word_postings {postings_sql('changed')};"
        ),
    }
    # No namespace keeps postings: nothing to do (the common case).
    memories_triggers(cur, "words", "word_postings", "SELECT 1 FROM word_namespaces", bodies)


def memories_triggers(
    cur: Any, name: str, function: str, needed: str, bodies: dict[str, str]
) -> None:
    """Statement-level triggers ``memories_<name>_<event>`` on ``memories`` for each event
    of ``bodies`` (insert, delete, update: the SQL it runs, over the rows ``new_rows`` and
    ``old_rows``), running functions ``recalld_<function>_<event>()`` as the tables' owner,
    which return at once when the query ``needed`` finds no row."""
    tables = {
        "insert": "NEW TABLE AS new_rows",
        "delete": "OLD TABLE AS old_rows",
        "update": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
    }
    for event, body in bodies.items():
        cur.execute(
            f"""
            CREATE OR REPLACE FUNCTION recalld_{function}_{event}() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
            BEGIN
                IF NOT EXISTS ({needed}) THEN
                    RETURN NULL;
                END IF;
                {body}
                RETURN NULL;
            END $$
            """
        )
        trigger = f"memories_{name}_{event}"
        cur.execute(f"DROP TRIGGER IF EXISTS {trigger} ON memories")
        cur.execute(
            f"CREATE TRIGGER {trigger} AFTER {event.upper()} ON memories REFERENCING"
            f" {tables[event]} FOR EACH STATEMENT EXECUTE FUNCTION recalld_{function}_{event}()"
        )


def postings_sql(rows: str) -> str:
    """``SELECT`` the postings of ``rows`` (memories' rows) of the listed namespaces."""
    return (
        "(namespace, token, pk, tf, dl) SELECT r.namespace, t.token, r.pk, t.tf, r.lex_length"
        f" FROM {rows} r JOIN word_namespaces w ON w.namespace = r.namespace CROSS JOIN LATERAL"
        " (SELECT token, count(*)::integer AS tf FROM unnest(r.lex_tokens) AS token"
        " GROUP BY token) t"
    )


WORDS_GONE = "RW001"
"""The SQLSTATE of ``recalld_words_listed(namespace)`` (migration 9): a statement reading a
namespace's word postings calls it first, and it refuses once they have been dropped, so a
store handle opened before the drop never reads postings that are not there."""
WHOLE_ROW_BYTES = 8160
"""``toast_tuple_target`` of ``memories`` (migration 8) and of the session table that new
rows pass through (``writes.CREATE_LOAD``): rows up to about a page stay whole, neither
compressed nor moved to TOAST. A value compressed in the session table stays compressed in
``memories``: the words of most rows of about 2.6 kB with their vector were, and a search
testing a small tenant's rows for its words decompressed them (a tenth of the server's
CPU for that search)."""
KEEP_VECTORS_INLINE = "ALTER COLUMN embedding SET STORAGE MAIN"
"""Migration 8's setting, which a change of the column's type resets: every ``ALTER
COLUMN embedding TYPE`` carries it along."""


def m010_collections(cur: Any) -> None:
    """Named collections: a root's ``name`` (unique per namespace), the context lines of a
    root and of sub-paths under it, and each indexed file's text (what ``get`` returns),
    behind the same wall as the other source tables."""
    cur.execute("ALTER TABLE source_roots ADD COLUMN IF NOT EXISTS name text")
    cur.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS source_roots_name ON source_roots (namespace, name)"
        " WHERE name IS NOT NULL"
    )
    cur.execute(
        """
        CREATE TABLE IF NOT EXISTS source_contexts (
            namespace text NOT NULL,
            root text NOT NULL,
            prefix text NOT NULL,
            context text NOT NULL,
            PRIMARY KEY (namespace, root, prefix)
        )
        """
    )
    cur.execute(
        """
        CREATE TABLE IF NOT EXISTS source_texts (
            namespace text NOT NULL,
            path text NOT NULL,
            text text NOT NULL,
            PRIMARY KEY (namespace, path)
        )
        """
    )
    for table in ("source_contexts", "source_texts"):
        _tenant_wall(cur, table, writes=False)


WALLED = {"memories": True, "source_roots": False, "source_files": False,
          "word_namespaces": True, "word_postings": True, "source_contexts": False,
          "source_texts": False}  # fmt: skip
"""Every table behind the tenant wall, and whether the wall checks its writes too."""


def m011_estimable_wall(cur: Any) -> None:
    """Every table's wall in :data:`_IN_NAMESPACES`'s form: the same rows admitted, planned
    as the tenant's own."""
    for table, writes in WALLED.items():
        _tenant_wall(cur, table, writes=writes)
