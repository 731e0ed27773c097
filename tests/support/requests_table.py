"""The ledger's v2 requests table written out by hand, for slot tests on a bare connection."""

from __future__ import annotations

# CREATE TABLE of the requests table in its v2 shape (without the context column)
REQUESTS = """CREATE TABLE requests (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, ts REAL NOT NULL, model TEXT NOT NULL,
    session TEXT NOT NULL, project TEXT NOT NULL, source INTEGER NOT NULL,
    input INTEGER NOT NULL, output INTEGER NOT NULL, cache_read INTEGER NOT NULL,
    cache_write_5m INTEGER NOT NULL, cache_write_1h INTEGER NOT NULL,
    service_tier TEXT NOT NULL, inference_geo TEXT NOT NULL, speed TEXT NOT NULL,
    recorded_cost_usd REAL NOT NULL DEFAULT 0, web_search INTEGER NOT NULL DEFAULT 0, gap REAL,
    roots INTEGER NOT NULL DEFAULT 1)"""
# the columns a row of the slot tests gives, in order (17 of them)
COLUMNS = ("key, ts, model, session, project, source, input, output, cache_read, cache_write_5m, "
           "cache_write_1h, service_tier, inference_geo, speed, web_search, gap, roots")
