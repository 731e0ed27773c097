"""The ledger's schema (v3) and the in-place migrations from v1 and v2.

One statement per item: the ledger runs them inside one transaction with the
header pragmas, so a kill at any point leaves either no schema or all of it
(executescript would commit first). IF NOT EXISTS: a second process creating
the same fresh ledger at the same moment finds the work done instead of failing.
"""

from __future__ import annotations

from typing import Final

from exporter.ledger import attr_days as attribution_days
from exporter.ledger import slots
from exporter.records import ALL_ROOTS, ATTRIBUTION, COUNT_SUMS, CountClass, gap_seconds
from exporter.sqlite import sqlite3

# The pages of a new ledger (SQLite's default is 4096; a file keeps the size it was made
# with). A month's first pass writes a quarter as many pages, WAL frames and checkpoint
# copies, and walks shallower B-trees: its writer 0.92-0.99x and its end 0.93-0.94x the CPU
# of 4096, 0.94-0.95x the wall (docs/benchmarks-history.md). A small batch writes 16 KiB per page
# it touches (the daemon's small passes ~0.5 ms slower).
PAGE_SIZE: Final = 16384
# How much the WAL takes before a commit folds it into the file: SQLite's default (1000
# pages) at its default page size, whatever the file's pages (the month's first pass is as
# fast with 256 pages of 16 KiB as with 1000: 1.00x).
WAL_CHECKPOINT_BYTES: Final = 4 * 1024 * 1024
LEDGER_FILE: Final = "ledger.sqlite3"  # the ledger's name in the state directory
LEGACY_FILE: Final = ""  # the file of v1 requests, whose provenance was never recorded
MAX_ROOT_BITS: Final = 62  # roots beyond the 62nd share the last bit (their scopes overlap)

REQUESTS: Final = f"""CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL, ts REAL NOT NULL, model TEXT NOT NULL,
    session TEXT NOT NULL, project TEXT NOT NULL, source INTEGER NOT NULL,
    input INTEGER NOT NULL, output INTEGER NOT NULL, cache_read INTEGER NOT NULL,
    cache_write_5m INTEGER NOT NULL, cache_write_1h INTEGER NOT NULL,
    service_tier TEXT NOT NULL, inference_geo TEXT NOT NULL, speed TEXT NOT NULL,
    recorded_cost_usd REAL NOT NULL, web_search INTEGER NOT NULL DEFAULT 0, gap REAL,
    context INTEGER NOT NULL DEFAULT 0, roots INTEGER NOT NULL DEFAULT 0,
    {", ".join(f"{c} TEXT NOT NULL DEFAULT ''" for c in ATTRIBUTION)})"""
# The keys' uniqueness, as an index of its own rather than the column's UNIQUE (as ledgers
# made before it have, equivalently: every statement works with either): a first pass
# into an empty ledger drops it and builds it once at its end (exporter.ledger.bulk),
# since sorting a month's keys costs a third of inserting them one by one at random.
KEY_INDEX_NAME: Final = "requests_key"
KEY_INDEX: Final = f"CREATE UNIQUE INDEX IF NOT EXISTS {KEY_INDEX_NAME} ON requests (key)"
KEY_AUTOINDEX: Final = "sqlite_autoindex_requests_1"  # the column's UNIQUE, in older ledgers
SCHEMA: Final = (
    REQUESTS,
    KEY_INDEX,
    "CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts)",
    "CREATE INDEX IF NOT EXISTS requests_session_ts ON requests (session, ts)",
    # Covering indexes for exact percentiles by an index walk (docs/figures.md).
    "CREATE INDEX IF NOT EXISTS requests_context ON requests (context, ts)",
    "CREATE INDEX IF NOT EXISTS requests_output ON requests (output, ts)",
    "CREATE INDEX IF NOT EXISTS requests_gap ON requests (gap, ts) "
    "WHERE source = 0 AND gap IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS requests_session_gap ON requests (session, gap) "
    "WHERE gap IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS checkpoints (
    path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, size INTEGER, offset INTEGER,
    fp_len INTEGER, fingerprint TEXT, mtime_ns INTEGER)""",
    "CREATE TABLE IF NOT EXISTS roots (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE)",
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
    *slots.SCHEMA,
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
# The index a raw pass (exporter.ledger.bulk) never reads while it stages, whose entries its
# batches would add in random order (a row's time): each batch's commit rewrote most of its
# pages. The pass drops it with the key's index and builds it once as it ends (sorted),
# before anything reads it (docs/benchmarks-history.md).
PASS_INDEXES: Final = tuple(st for st in SCHEMA if " requests_ts ON " in st)
# Indexes only the incremental path reads (a row by its key, appearances by their file):
# no report and no projection does. A raw pass drops them, and the first incremental write
# builds them (exporter.ledger.bulk.rekey): a command that only reads, or finds nothing new,
# never pays for them. (The key's own index is KEY_INDEX, or an older ledger's UNIQUE.)
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


def create(db: sqlite3.Connection) -> None:
    """Create what is missing of the schema (inside the caller's transaction).

    v3 added the attribution columns (docs/figures.md, "Attribution"): a v2
    ledger gets them by ``ALTER TABLE … ADD COLUMN`` (no row is rewritten) and
    its rows read as "" ("none" in the views: they were stored before the
    fields were read; forgetting the ledger reads them again from transcripts).
    """
    for statement in SCHEMA:
        db.execute(statement)
    have = {row[1] for row in db.execute("PRAGMA table_info(requests)")}
    for column in ATTRIBUTION:
        if column not in have:
            db.execute(f"ALTER TABLE requests ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
    if not set(ATTRIBUTION) <= have:  # any attribution sums kept were of other columns
        attribution_days.forget(db)


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
