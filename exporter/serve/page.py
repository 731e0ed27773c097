"""The landing page ``/`` and ``/api/summary.json``: the report's figures, without Grafana.

The figures come from :mod:`exporter.serve.page_figures`, the HTML from
:mod:`exporter.serve.page_html`, the range asked for from
:mod:`exporter.serve.page_range`; this module serves them. The rendered page
of each range is cached for ``ttl`` seconds; a copy up to ``stale`` seconds old is served
while it is rebuilt in the background, so reloads never wait for the SQL,
and an older one is rebuilt before answering.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.ledger.store import Ledger
from exporter.projections.class_prices import ClassPrices
from exporter.projections.json_text import to_json
from exporter.projections.periods import PeriodError, local_zone
from exporter.projections.pricing import RateTable
from exporter.serve.page_figures import LedgerSource, PageData
from exporter.serve.page_html import render, render_refusal
from exporter.serve.page_range import PageQuery, QueryError, parse_query
from exporter.sqlite import sqlite3

if TYPE_CHECKING:  # the options' module imports OpenTelemetry; the page needs only four fields
    from exporter.projections.metrics import MetricsOptions

MAX_RANGES = 16  # ranges whose page is cached at once
StartResponse = Callable[..., Any]
Wsgi = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def source_of(options: MetricsOptions, ledger: Ledger, roots: Sequence[Path], pricing: RateTable,
              *, clock: Callable[[], float] = time.time,
              env: Mapping[str, str] = os.environ) -> LedgerSource:
    """The page's figures for a running ``serve``: its options, ledger, roots and prices."""
    return LedgerSource(ledger, roots, ClassPrices.of(pricing), local_zone(env),
                        budgets=dict(options.budgets), project_label=options.project_label,
                        project_grouping=options.project_grouping,
                        kv_bytes_per_token=dict(options.kv_bytes_per_token),
                        upload_bytes_per_token=options.upload_bytes_per_token, clock=clock)


class _Cache:
    """The last page and JSON: fresh for ``ttl`` s, then rebuilt, in the background if recent.

    A copy younger than ``stale`` seconds is served while one rebuild (never two
    at once) runs via ``spawn``, so a reloading browser never waits for the SQL;
    an older one (the first request, a visit after a pause) is rebuilt before
    answering, so a page opened after a pause never shows figures that old.
    """

    def __init__(self, source: Callable[[], PageData], version: str, *, ttl: float,
                 stale: float, clock: Callable[[], float],
                 spawn: Callable[[Callable[[], None]], None]) -> None:
        self._source, self._version, self._clock, self._spawn = source, version, clock, spawn
        self._ttl, self._stale = ttl, stale
        self._lock = threading.Lock()  # guards the fields below
        self._build = threading.Lock()  # one rebuild at a time
        self._at = -math.inf
        self._bodies = (b"", b"")
        self._rebuilding = False

    def get(self) -> tuple[bytes, bytes]:
        """The HTML and JSON bodies."""
        with self._lock:
            age, bodies = self._clock() - self._at, self._bodies
            background = self._ttl <= age < self._stale and not self._rebuilding
            if background:
                self._rebuilding = True
        if age >= self._stale:
            return self._rebuild(self._stale)
        if background:
            self._spawn(self._background)
        return bodies

    def _background(self) -> None:
        """A rebuild off the request path; the stale page stays if it cannot finish."""
        try:
            self._rebuild(self._ttl)
        except sqlite3.ProgrammingError:
            pass  # the ledger closed under it: the daemon is stopping
        finally:
            with self._lock:
                self._rebuilding = False

    def _rebuild(self, older_than: float) -> tuple[bytes, bytes]:
        """Compute the figures and both bodies unless a rebuild just finished; keep them."""
        with self._build:
            with self._lock:
                if self._clock() - self._at < older_than:  # another thread just built them
                    return self._bodies
            data = self._source()
            bodies = (render(data, self._version).encode(),
                      (to_json(data.to_json()) + "\n").encode())
            with self._lock:
                self._bodies, self._at = bodies, self._clock()
            return bodies


def _thread(job: Callable[[], None]) -> None:
    """Run ``job`` on a daemon thread (it never blocks shutdown)."""
    threading.Thread(target=job, name="page-rebuild", daemon=True).start()


class _Caches:
    """One :class:`_Cache` per range asked, the :data:`MAX_RANGES` most recent kept.

    Keyed by the range as normalised (:meth:`PageQuery.key` and the zone's
    name), so ``?since=7d`` and ``?since=7d&tz=local`` share a page, and a
    client inventing ranges costs a bounded amount of memory.
    """

    def __init__(self, make: Callable[[PageQuery], _Cache]) -> None:
        self._make = make
        self._lock = threading.Lock()  # guards _caches
        self._caches: OrderedDict[tuple[str | None, ...], _Cache] = OrderedDict()

    def get(self, query: PageQuery) -> tuple[bytes, bytes]:
        """The bodies for ``query``'s range."""
        key = query.key()
        with self._lock:
            cache = self._caches.get(key)
            if cache is None:
                cache = self._caches[key] = self._make(query)
                while len(self._caches) > MAX_RANGES:
                    self._caches.popitem(last=False)
            self._caches.move_to_end(key)
        return cache.get()


def routes(source: Callable[[PageQuery], PageData], version: str, *,
           check: Callable[[PageQuery], None] = lambda query: None, ttl: float = 2.0,
           stale: float = 10.0, clock: Callable[[], float] = time.monotonic,
           spawn: Callable[[Callable[[], None]], None] = _thread) -> dict[str, Wsgi]:
    """WSGI handlers for ``/``, ``/index.html`` and ``/api/summary.json``.

    Both take the range as ``since``, ``until`` and ``tz`` (:mod:`exporter.serve.page_range`);
    ``check`` raises the PeriodError ``report`` gives for a range it cannot take,
    answered as a 400 with that message. The HTTP app puts them behind its basic
    auth (and TLS) like every route.
    """
    caches = _Caches(lambda query: _Cache(functools.partial(source, query), version, ttl=ttl,
                                          stale=stale, clock=clock, spawn=spawn))

    def asked(environ: dict[str, Any]) -> PageQuery | str:
        """The range asked for, or why it cannot be served."""
        try:
            query = parse_query(str(environ.get("QUERY_STRING", "")))
            check(query)
        except (QueryError, PeriodError) as exc:
            return str(exc)
        return query

    def page(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        query = asked(environ)
        if isinstance(query, str):
            body, status = render_refusal(query, version).encode(), "400 Bad Request"
        else:
            body, status = caches.get(query)[0], "200 OK"
        start(status, [("Content-Type", "text/html; charset=utf-8"),
                       ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
                       ("Content-Security-Policy",
                        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
                        "form-action 'self'")])
        return [body]

    def summary_json(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        query = asked(environ)
        if isinstance(query, str):
            body, status = (to_json({"error": query}) + "\n").encode(), "400 Bad Request"
        else:
            body, status = caches.get(query)[1], "200 OK"
        start(status, [("Content-Type", "application/json"),
                       ("Content-Length", str(len(body))), ("Cache-Control", "no-store")])
        return [body]

    return {"/": page, "/index.html": page, "/api/summary.json": summary_json}
