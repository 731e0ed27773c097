"""Every table of the ledger file (schema v5), and the in-place migrations from v1 to v4.

The requests and their provenance, counters, meta and rollups (:data:`SCHEMA`,
with the usage slots' tables, :data:`SLOT_TABLES`); the attribution day sums
(:data:`ATTR_DAYS_TABLE`, made when first summed) and the plan tables
(:data:`PLAN_TABLES`, made when the status line or Codex's logs first gave a
sample; :func:`migrate_plan` brings older ones to v5).

One statement per item: the ledger runs them inside one transaction with the
header pragmas, so a kill at any point leaves either no schema or all of it
(executescript would commit first). IF NOT EXISTS: a second process creating
the same fresh ledger at the same moment finds the work done instead of failing.
"""

from __future__ import annotations

from typing import Final

from exporter.records import ALL_ROOTS, ATTRIBUTION, COUNT_SUMS, CountClass, gap_seconds
from exporter.sqlite import sqlite3

# The pages of a new ledger (a file keeps the size it was made with). A commit writes
# every page it changed whole, so a live commit's cost is its page size times the b-trees
# it touches (two dozen, one page each: rows, provenance, sums): at 16 KiB a line a second
# cost ~220 KiB of disk writes a line, at 4 KiB under 64 KiB (docs/benchmarks.md, "Live
# writes and the WAL"). A first pass pays ~3 % for the smaller pages (more to fill).
PAGE_SIZE: Final = 4096
# How much the WAL takes before a commit folds it into the file: SQLite's default (1000
# pages) at its default page size, whatever the file's pages (a first pass is as fast with
# 256 pages of 16 KiB as with 1000).
WAL_CHECKPOINT_BYTES: Final = 4 * 1024 * 1024
LEDGER_FILE: Final = "ledger.sqlite3"  # the ledger's name in the state directory
LEGACY_FILE: Final = ""  # the file of v1 requests, whose provenance was never recorded
MAX_ROOT_BITS: Final = 62  # roots beyond the 62nd share the last bit (their scopes overlap)

# The columns of every table of sums (slots, days, blocks), after its time unit's column.
_SLOT_SUMS: Final = """
    {unit} INTEGER NOT NULL, key INTEGER NOT NULL, roots INTEGER NOT NULL,
    bucket INTEGER NOT NULL, sid INTEGER NOT NULL,
    n INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL, cache_write_5m INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL, web_search INTEGER NOT NULL,
    gap_ms INTEGER, first REAL NOT NULL, last REAL NOT NULL,"""

SLOT_TABLES: Final = (
    "CREATE TABLE IF NOT EXISTS slot_sessions (id INTEGER PRIMARY KEY, session TEXT NOT NULL "
    "UNIQUE)",
    # One key per session, project and price attributes: integers keep the slot rows
    # narrow and make every GROUP BY of a report sort integers, not text.
    """CREATE TABLE IF NOT EXISTS slot_keys (
    id INTEGER PRIMARY KEY, sid INTEGER NOT NULL, project TEXT NOT NULL, model TEXT NOT NULL,
    source INTEGER NOT NULL, service_tier TEXT NOT NULL, inference_geo TEXT NOT NULL,
    speed TEXT NOT NULL, long INTEGER NOT NULL,
    UNIQUE (sid, project, model, source, service_tier, inference_geo, speed, long))""",
    f"""CREATE TABLE IF NOT EXISTS slots ({_SLOT_SUMS.format(unit="slot")}
    m0 INTEGER NOT NULL, m1 INTEGER NOT NULL, m2 INTEGER NOT NULL, m3 INTEGER NOT NULL,
    m4 INTEGER NOT NULL,
    PRIMARY KEY (slot, key, roots, bucket)) WITHOUT ROWID""",
    # The same sums per UTC day, from the slots: a report without a time range (or
    # by UTC day) groups a few thousand day rows a year instead of 100k slot rows.
    f"""CREATE TABLE IF NOT EXISTS slot_days ({_SLOT_SUMS.format(unit="day")}
    PRIMARY KEY (day, key, roots, bucket)) WITHOUT ROWID""",
    # The same sums per 16-day block (``day / 16``), from the day sums: a report over
    # a year groups a third of the day rows (a key, a session's, rarely spans two days).
    f"""CREATE TABLE IF NOT EXISTS slot_blocks ({_SLOT_SUMS.format(unit="block")}
    PRIMARY KEY (block, key, roots, bucket)) WITHOUT ROWID""",
    # Per block without the session and project: by price class (a year's summary reads
    # ~20 rows a block), and by session (its session figures: one row per session).
    """CREATE TABLE IF NOT EXISTS slot_classes (
    id INTEGER PRIMARY KEY, model TEXT NOT NULL, source INTEGER NOT NULL,
    service_tier TEXT NOT NULL, inference_geo TEXT NOT NULL, speed TEXT NOT NULL,
    long INTEGER NOT NULL,
    UNIQUE (model, source, service_tier, inference_geo, speed, long))""",
    """CREATE TABLE IF NOT EXISTS slot_class_blocks (
    block INTEGER NOT NULL, class INTEGER NOT NULL, roots INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    n INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL, cache_write_5m INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL, web_search INTEGER NOT NULL,
    gap_ms INTEGER, first REAL NOT NULL, last REAL NOT NULL,
    PRIMARY KEY (block, class, roots, bucket)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS slot_session_blocks (
    block INTEGER NOT NULL, sid INTEGER NOT NULL, roots INTEGER NOT NULL,
    n INTEGER NOT NULL, output INTEGER NOT NULL, cache_read INTEGER NOT NULL,
    gaps INTEGER NOT NULL, first REAL NOT NULL, last REAL NOT NULL,
    PRIMARY KEY (block, sid, roots)) WITHOUT ROWID""",
    # Per UTC day, over every request: the most in one calendar minute and the most
    # sessions in one aligned 10-minute window (both windows lie inside a day).
    """CREATE TABLE IF NOT EXISTS slot_day_peaks (
    day INTEGER PRIMARY KEY, minute INTEGER NOT NULL, sessions INTEGER NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS slot_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # Requests per value bin, per UTC day (span 0) and 16-day block (span 1): see above.
    """CREATE TABLE IF NOT EXISTS slot_hist (
    measure INTEGER NOT NULL, span INTEGER NOT NULL, unit INTEGER NOT NULL,
    roots INTEGER NOT NULL, bin INTEGER NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (measure, span, unit, roots, bin)) WITHOUT ROWID""",
)

# The same counters per transcript root (``roots.id``), so that a report on some roots
# shows their lines and rejections only; root 0 holds what a v3 ledger of several roots
# counted before (it cannot be split: in the whole ledger's figures only).
ROOT_COUNTERS: Final = """CREATE TABLE IF NOT EXISTS root_counters (
    root INTEGER NOT NULL, name TEXT NOT NULL, label TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (root, name, label)) WITHOUT ROWID"""
UNATTRIBUTED_ROOT: Final = 0
REQUESTS: Final = f"""CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL, ts REAL NOT NULL, model TEXT NOT NULL,
    session TEXT NOT NULL, project TEXT NOT NULL, source INTEGER NOT NULL,
    input INTEGER NOT NULL, output INTEGER NOT NULL, cache_read INTEGER NOT NULL,
    cache_write_5m INTEGER NOT NULL, cache_write_1h INTEGER NOT NULL,
    service_tier TEXT NOT NULL, inference_geo TEXT NOT NULL, speed TEXT NOT NULL,
    recorded_cost_usd REAL NOT NULL, web_search INTEGER NOT NULL DEFAULT 0, gap REAL,
    context INTEGER NOT NULL DEFAULT 0, roots INTEGER NOT NULL DEFAULT 0,
    {", ".join(f"{c} TEXT NOT NULL DEFAULT ''" for c in ATTRIBUTION)},
    reasoning INTEGER NOT NULL DEFAULT 0, context_window INTEGER NOT NULL DEFAULT 0,
    indexed INTEGER NOT NULL DEFAULT 1)"""
# The keys' uniqueness, as an index of its own rather than the column's UNIQUE (as ledgers
# made before it have, equivalently: every statement works with either): a first pass
# into an empty ledger drops it and builds it once (exporter.ledger.raw_pass),
# since sorting the keys once costs less than inserting them one by one at random.
KEY_INDEX_NAME: Final = "requests_key"
KEY_INDEX: Final = f"CREATE UNIQUE INDEX IF NOT EXISTS {KEY_INDEX_NAME} ON requests (key)"
KEY_AUTOINDEX: Final = "sqlite_autoindex_requests_1"  # the column's UNIQUE, in older ledgers
# The value indexes: of the rows folded in only (``indexed``; see SCHEMA).
VALUE_INDEXES: Final = (
    "CREATE INDEX IF NOT EXISTS requests_context ON requests (context, ts) WHERE indexed = 1",
    "CREATE INDEX IF NOT EXISTS requests_output ON requests (output, ts) WHERE indexed = 1",
    # (Not "AND gap IS NOT NULL" too: with three terms SQLite no longer reads the index
    # alone; a walk's "gap IS NOT NULL" seeks past the few NULLs.)
    "CREATE INDEX IF NOT EXISTS requests_gap ON requests (gap, ts) "
    "WHERE source = 0 AND indexed = 1",
)
# The rows waiting outside them. On the flag itself: "indexed = 0" is then a lookup of
# this index by its column, which SQLite prefers for a query of the waiting rows over
# a scan of any other index whose condition the query meets (it keeps no statistics).
UNINDEXED_INDEX: Final = ("CREATE INDEX IF NOT EXISTS requests_unindexed ON requests (indexed) "
                          "WHERE indexed = 0")
SCHEMA: Final = (
    REQUESTS,
    KEY_INDEX,
    "CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts)",
    "CREATE INDEX IF NOT EXISTS requests_session_ts ON requests (session, ts)",
    # Covering indexes for exact percentiles by an index walk (docs/figures.md), of the rows
    # folded in (exporter.ledger.unindexed: a live row lands anywhere in them, so rows wait
    # and go in by the thousand); the rest are found by the small index after.
    *VALUE_INDEXES,
    UNINDEXED_INDEX,
    "CREATE INDEX IF NOT EXISTS requests_session_gap ON requests (session, gap) "
    "WHERE gap IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS checkpoints (
    path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, size INTEGER, offset INTEGER,
    fp_len INTEGER, fingerprint TEXT, mtime_ns INTEGER, carry TEXT NOT NULL DEFAULT '')""",
    # agent: whose logs the root holds (exporter.ingest.formats: "claude", "codex").
    "CREATE TABLE IF NOT EXISTS roots (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, "
    "agent TEXT NOT NULL DEFAULT 'claude')",
    """CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, root INTEGER, session TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS files_session ON files (session)",
    """CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY, last_ts REAL NOT NULL) WITHOUT ROWID""",
    # prev: ts of the latest earlier main request of the same file (None: none, or not main)
    """CREATE TABLE IF NOT EXISTS appearances (
    request INTEGER NOT NULL, file INTEGER NOT NULL, prev REAL,
    PRIMARY KEY (request, file)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS appearances_file ON appearances (file)",
    """CREATE TABLE IF NOT EXISTS counters (
    name TEXT NOT NULL, label TEXT NOT NULL, value INTEGER NOT NULL, PRIMARY KEY (name, label))""",
    ROOT_COUNTERS,
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # Counter rollups: the sums of every request per raw class and roots bitmask.
    f"""CREATE TABLE IF NOT EXISTS rollup_counts (
    roots INTEGER NOT NULL, model TEXT NOT NULL, project TEXT NOT NULL, source INTEGER NOT NULL,
    geo TEXT NOT NULL, tier TEXT NOT NULL, speed TEXT NOT NULL, long INTEGER NOT NULL,
    period INTEGER NOT NULL, gap TEXT NOT NULL, first_ts REAL NOT NULL, last_ts REAL NOT NULL,
    {", ".join(f"{c} INTEGER NOT NULL" for c in COUNT_SUMS)},
    PRIMARY KEY (roots, {", ".join(CountClass._fields)})) WITHOUT ROWID""",
    # Histogram rollups of settled requests: a count per bucket; bucket -1 holds the sum.
    """CREATE TABLE IF NOT EXISTS rollup_hist (
    roots INTEGER NOT NULL, name TEXT NOT NULL, model TEXT NOT NULL, source INTEGER NOT NULL,
    arch TEXT NOT NULL, bucket INTEGER NOT NULL, value NOT NULL,
    PRIMARY KEY (roots, name, model, source, arch, bucket)) WITHOUT ROWID""",
    # Requests counted but not yet in the histograms (their lines may still grow).
    "CREATE TABLE IF NOT EXISTS unsettled (request INTEGER PRIMARY KEY, due REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS unsettled_due ON unsettled (due)",
    *SLOT_TABLES,
)
ATTR_DAYS_META: Final = "attr_days"  # its row in slot_meta (exporter.ledger.attr_days)
ATTR_DAYS_TABLE: Final = """CREATE TABLE IF NOT EXISTS attr_days (
    day INTEGER NOT NULL, kind INTEGER NOT NULL, value TEXT NOT NULL, effort TEXT NOT NULL,
    key INTEGER NOT NULL, roots INTEGER NOT NULL,
    n INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL, cache_write_5m INTEGER NOT NULL,
    cache_write_1h INTEGER NOT NULL, web_search INTEGER NOT NULL,
    first REAL NOT NULL, last REAL NOT NULL,
    PRIMARY KEY (day, kind, value, effort, key, roots)) WITHOUT ROWID"""
# The status line's samples (exporter.ledger.plan_store), and since v5 the plan windows
# other agents write into their own logs (Codex's rate_limits): ``agent`` says whose
# ("claude": the status line's), and is part of a window instance's key, so the same
# window name of two agents never merges.
PLAN_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS plan_samples (
        key TEXT PRIMARY KEY, first_seen REAL NOT NULL, last_seen REAL NOT NULL,
        session TEXT, model TEXT, version TEXT, context_pct REAL, context_size INTEGER,
        session_cost_usd REAL, windows TEXT, agent TEXT NOT NULL DEFAULT 'claude'
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS plan_samples_first_seen ON plan_samples (first_seen)",
    """CREATE TABLE IF NOT EXISTS plan_levels (
        window TEXT NOT NULL, resets_at INTEGER NOT NULL, pct REAL NOT NULL,
        first_seen REAL NOT NULL, agent TEXT NOT NULL DEFAULT 'claude',
        PRIMARY KEY (agent, window, resets_at, pct)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS plan_windows (
        window TEXT NOT NULL, resets_at INTEGER NOT NULL, max_pct REAL NOT NULL,
        first_seen REAL NOT NULL, last_seen REAL NOT NULL, reported_resets_at INTEGER NOT NULL,
        agent TEXT NOT NULL DEFAULT 'claude', PRIMARY KEY (agent, window, resets_at)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS plan_meta (
        name TEXT PRIMARY KEY, t REAL NOT NULL, value REAL NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS plan_counters (
        name TEXT NOT NULL, label TEXT NOT NULL, value INTEGER NOT NULL,
        PRIMARY KEY (name, label)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS plan_spool (
        dev INTEGER NOT NULL, ino INTEGER NOT NULL, fp TEXT NOT NULL, offset INTEGER NOT NULL,
        PRIMARY KEY (dev, ino)
    ) WITHOUT ROWID""",
)
V1_TABLES: Final = frozenset({"requests", "files", "counters"})
# Every plain index on requests (the key's unique index aside).
REQUESTS_INDEXES: Final = tuple(st for st in SCHEMA if st.startswith("CREATE INDEX")
                                and " ON requests " in st)
# Indexes for readers only (the report's percentiles and per-session figures): a pass
# that brings more rows than the ledger holds drops them and builds them once after.
READER_INDEXES: Final = tuple(st for st in SCHEMA if st.startswith("CREATE INDEX")
                               and any(n in st for n in ("requests_session_ts",
                                                         "requests_context",
                                                         "requests_output", "requests_gap",
                                                         "requests_session_gap")))
# The index a raw pass (exporter.ledger.raw_pass) never reads while it stages, whose
# entries its batches would add in random order (a row's time): each batch's commit would
# rewrite most of its pages. The pass drops it with the key's index and builds it once as
# it ends (sorted), before anything reads it.
PASS_INDEXES: Final = tuple(st for st in SCHEMA if " requests_ts ON " in st)
# Indexes only the incremental path reads (a row by its key, appearances by their file):
# no report and no projection does. A raw pass drops them, and the first incremental write
# builds them (exporter.ledger.staging.ensure_write_indexes): a command that only reads,
# or finds nothing new, never pays for them. (The key's own index is KEY_INDEX, or an older
# ledger's UNIQUE.)
WRITE_INDEXES: Final = tuple(st for st in SCHEMA if " appearances_file ON " in st)


def migrate_v1(db: sqlite3.Connection) -> None:
    """Bring v1 tables to v2 in place (inside the caller's transaction), losing nothing.

    v1 never recorded where a request was read: its requests get every roots
    bit (they are in every scope) and one appearance in a pseudo-file
    (:data:`LEGACY_FILE`), whose predecessors are v1's per-session gaps.
    """
    db.execute("ALTER TABLE files RENAME TO checkpoints")
    db.execute("ALTER TABLE requests RENAME TO requests_v1")
    db.execute(REQUESTS)
    v1 = ("key, ts, model, session, project, source, input, output, cache_read, "
          "cache_write_5m, cache_write_1h, service_tier, inference_geo, speed, recorded_cost_usd")
    # Time order gives ids the order new rows get: appends to the id B-tree.
    db.execute(
        f"INSERT INTO requests ({v1}, context, roots) SELECT {v1}, "
        f"input + cache_read + cache_write_5m + cache_write_1h, {ALL_ROOTS} "
        "FROM requests_v1 ORDER BY ts, key")
    db.execute("DROP TABLE requests_v1")


# Columns added in place (no row rewritten). v5: Codex turns' reasoning tokens and context
# window, a file's parser state carried between reads (exporter.ingest.codex), and whose
# logs a root holds. v6: whether a row is in the value indexes (every older row is).
_ADDED_COLUMNS: Final = (
    ("requests", "reasoning", "INTEGER NOT NULL DEFAULT 0"),
    ("requests", "context_window", "INTEGER NOT NULL DEFAULT 0"),
    ("checkpoints", "carry", "TEXT NOT NULL DEFAULT ''"),
    ("roots", "agent", "TEXT NOT NULL DEFAULT 'claude'"),
    ("requests", "indexed", "INTEGER NOT NULL DEFAULT 1"),
)


# v5's plan tables: the window tables' keys gain ``agent``, which ALTER TABLE cannot do, so
# they are copied into tables of the new shape (a few rows a window instance: small).
_PLAN_REKEYED: Final = {
    "plan_levels": "window, resets_at, pct, first_seen",
    "plan_windows": "window, resets_at, max_pct, first_seen, last_seen, reported_resets_at",
}


def migrate_plan(db: sqlite3.Connection) -> None:
    """Bring plan tables made before v5 to v5's shape (inside the caller's transaction).

    Their rows are the status line's (``agent`` 'claude'). Nothing to do where
    the tables do not exist yet or already have the column.
    """
    for table, columns in _PLAN_REKEYED.items():
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if not have or "agent" in have:
            continue
        db.execute(f"ALTER TABLE {table} RENAME TO {table}_v4")
        db.execute(next(st for st in PLAN_TABLES if f" {table} (" in st))
        db.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table}_v4")
        db.execute(f"DROP TABLE {table}_v4")
    have = {row[1] for row in db.execute("PRAGMA table_info(plan_samples)")}
    if have and "agent" not in have:
        db.execute("ALTER TABLE plan_samples ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude'")


def create(db: sqlite3.Connection) -> None:
    """Create what is missing of the schema (inside the caller's transaction).

    v3 added the attribution columns (docs/figures.md, "Attribution"): a v2
    ledger gets them by ``ALTER TABLE … ADD COLUMN`` (no row is rewritten) and
    its rows read as "" ("none" in the views: they were stored before the
    fields were read; forgetting the ledger reads them again from transcripts).
    v6's value indexes hold folded rows only: older ones (of every row) are
    built again, once.
    """
    have = {row[1] for row in db.execute("PRAGMA table_info(requests)")}
    if have:  # an older ledger: its columns first, which the new indexes name
        _add_columns(db)
        for statement in VALUE_INDEXES:
            name = index_name(statement)
            sql = db.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?",
                             (name,)).fetchone()
            if sql is not None and "indexed" not in sql[0]:
                db.execute(f"DROP INDEX {name}")
    for statement in SCHEMA:
        db.execute(statement)
    _add_columns(db)
    migrate_plan(db)
    if have and not set(ATTRIBUTION) <= have:  # any attribution sums were of other columns
        db.execute("DELETE FROM slot_meta WHERE name = ?", (ATTR_DAYS_META,))


def _add_columns(db: sqlite3.Connection) -> None:
    """Add the attribution columns and :data:`_ADDED_COLUMNS` to the tables there are."""
    have = {row[1] for row in db.execute("PRAGMA table_info(requests)")}
    for column in ATTRIBUTION:
        if column not in have:
            db.execute(f"ALTER TABLE requests ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
    for table, column, kind in _ADDED_COLUMNS:
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if columns and column not in columns:  # (a table not made yet gets it when made)
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def attribute_counters(db: sqlite3.Connection) -> None:
    """v4: a ledger's counters, kept so far for all its roots at once, given to a root.

    Exact when the ledger knows one root (every line it counted was that
    root's); with several, the counts go to :data:`UNATTRIBUTED_ROOT`, which
    only the whole ledger's figures include: a guess would show a report on one
    root lines of another. Runs in the caller's transaction, once (v3 → v4).
    """
    roots = [r[0] for r in db.execute("SELECT id FROM roots LIMIT 2")]
    owner = roots[0] if len(roots) == 1 else UNATTRIBUTED_ROOT
    db.execute("INSERT OR IGNORE INTO root_counters SELECT ?, name, label, value FROM counters",
               (owner,))


def v1_provenance(db: sqlite3.Connection) -> None:
    """After the v2 schema exists: the legacy file, appearances, gaps and sessions of v1 rows."""
    db.execute("INSERT INTO files (path, root, session) VALUES (?, NULL, '')", (LEGACY_FILE,))
    db.execute(
        "INSERT INTO appearances (request, file, prev) SELECT id, "
        "(SELECT id FROM files WHERE path = ?), NULL FROM requests", (LEGACY_FILE,)
    )
    # v1's gaps: each main request after its session's previous one, (ts, key) order.
    db.execute(
        "UPDATE appearances SET prev = p.prev FROM (SELECT id, lag(ts) OVER "
        "(PARTITION BY session ORDER BY ts, key) AS prev FROM requests WHERE source = 0) AS p "
        "WHERE appearances.request = p.id"
    )
    rows = db.execute(
        "SELECT r.id, r.ts, a.prev FROM requests r JOIN appearances a ON a.request = r.id "
        "WHERE a.prev IS NOT NULL"
    ).fetchall()
    db.executemany("UPDATE requests SET gap = ? WHERE id = ?",
                   [(gap_seconds(ts, prev), rid) for rid, ts, prev in rows])
    db.execute("INSERT INTO sessions SELECT session, max(ts) FROM requests GROUP BY session")


def has_index(db: sqlite3.Connection, name: str) -> bool:
    """Whether the file has an index of that name."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?",
                      (name,)).fetchone() is not None


def index_name(statement: str) -> str:
    """The name in a ``CREATE [UNIQUE] INDEX IF NOT EXISTS name ON …`` statement."""
    return statement.split(" ON ", 1)[0].rsplit(maxsplit=1)[-1]


def create_slot_tables(db: sqlite3.Connection) -> None:
    """Create the usage slots' tables (inside the caller's transaction) where missing."""
    for statement in SLOT_TABLES:
        db.execute(statement)
