"""Load: many concurrent scrapers while transcripts grow at a high line rate.

A writer appends realistic lines (three streaming lines per request plus a
tool-result line with a few kB of payload) to several live session files at a
target rate; N threads scrape /metrics back to back on loopback for a bounded
time. Reported: scrape latency (p50/p99/max), errors, lines and bytes per
second actually written, and append-to-visible latency (from a write to the
end of the first scrape showing its requests). At the end the totals must be
exact: every appended request counted once, with its final output tokens.

Usage: python3 -m bench.load [--seconds 20] [--scrapers 16] [--rate 3000] [--files 4]
Prints one JSON document. Loopback only; bounded in time.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.synth import GenOptions, generate
from tests.support.exposition import total
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll

_REQUESTS = re.compile(rb"^claude_code_requests_total\{[^\n]*\} ([0-9.e+]+)$", re.M)
_OUTPUT = re.compile(rb'^claude_code_tokens_total\{[^\n]*type="output"[^\n]*\} ([0-9.e+]+)$',
                     re.M)
LINES_PER_REQUEST = 4  # three streaming lines + one tool result


@dataclass
class Shared:
    """What the writer and the scrapers record (appends are atomic under the GIL)."""

    stop: threading.Event = field(default_factory=threading.Event)
    appends: list[tuple[float, int]] = field(default_factory=list)  # (time, cumulative reqs)
    scrapes: list[tuple[float, float, float]] = field(default_factory=list)  # start, end, reqs
    errors: list[str] = field(default_factory=list)
    lines: int = 0
    bytes: int = 0
    output_tokens: int = 0


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _request_lines(n: int, payload: str, ts: str | None = None) -> bytes:
    """One request as Claude Code writes it: streaming splits, then a tool result.

    ``ts``: the lines' timestamp (None: one fixed time for every request, the
    workload this benchmark measured before it wrote the time of writing).
    """
    key, rid = f"msg_load_{n}", f"req_load_{n}"
    final = 50 + n % 400
    usage = {"input_tokens": 3, "cache_read_input_tokens": 1000 + n,
             "cache_creation_input_tokens": 20}
    recs: list[Any] = [
        (assistant(key, rid, session=f"load{n % 4}", usage={**usage, "output_tokens": out})
         if ts is None else
         assistant(key, rid, session=f"load{n % 4}", usage={**usage, "output_tokens": out},
                   ts=ts))
        for out in (1, 12, final)
    ]
    recs.append({"type": "user", "sessionId": f"load{n % 4}", "message": {
        "role": "user", "content": [{"type": "tool_result", "content": payload}]}})
    return jsonl(*recs)


def _now_iso() -> str:
    """The current UTC time as Claude Code writes it (milliseconds, Z)."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def _writer(files: list[Path], rate: float, shared: Shared, same_time: bool = False) -> None:
    """Append requests at ``rate`` lines per second in 20 ms ticks (``same_time``: one ts)."""
    payload = "log line with some text " * 80  # ~2 kB of tool output
    per_tick = max(1, round(rate * 0.02 / LINES_PER_REQUEST))
    n = 0
    handles = [f.open("ab") for f in files]
    try:
        next_tick = time.perf_counter()
        while not shared.stop.is_set():
            for _ in range(per_tick):
                data = _request_lines(n, payload, None if same_time else _now_iso())
                handles[n % len(handles)].write(data)
                handles[n % len(handles)].flush()
                shared.lines += LINES_PER_REQUEST
                shared.bytes += len(data)
                shared.output_tokens += 50 + n % 400
                n += 1
            shared.appends.append((time.perf_counter(), n))
            next_tick += 0.02
            shared.stop.wait(max(0.0, next_tick - time.perf_counter()))  # pacing, not sync
    finally:
        for fh in handles:
            fh.close()


def _scraper(url: str, shared: Shared) -> None:
    """Scrape back to back until told to stop."""
    while not shared.stop.is_set():
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = resp.read()
                status = resp.status
        except OSError as exc:
            shared.errors.append(f"{type(exc).__name__}: {exc}")
            continue
        end = time.perf_counter()
        if status != 200:
            shared.errors.append(f"HTTP {status}")
            continue
        shared.scrapes.append((start, end, sum(float(v) for v in _REQUESTS.findall(body))))


def _visible_latencies(shared: Shared, base: float) -> list[float]:
    """For each append batch: first scrape end showing its requests, minus the write time."""
    out = []
    scrapes = sorted(shared.scrapes, key=lambda s: s[1])
    j = 0
    for at, cumulative in shared.appends:
        while j < len(scrapes) and scrapes[j][1] < at:
            j += 1
        k = j
        while k < len(scrapes) and scrapes[k][2] < base + cumulative:
            k += 1
        if k < len(scrapes):
            out.append(scrapes[k][1] - at)
    return out


def run(seconds: float = 20.0, scrapers: int = 16, rate: float = 3000.0, files: int = 4,
        work: Path | None = None, *, same_time: bool = False) -> dict[str, Any]:
    """One bounded load run; returns the figures (and whether the totals were exact).

    Lines carry the time they are written, as Claude Code's do; ``same_time``
    gives every request one fixed timestamp instead (the older workload).
    """
    own = work is None
    work = work or Path(tempfile.mkdtemp(prefix="bench-load-"))
    try:
        tree = work / "tree"
        truth = generate(tree, GenOptions(seed=7, sessions=3, requests_per_session=60))
        live = tree / "projects" / "-home-u-load"
        live.mkdir(parents=True)
        targets = [live / f"load-{i}.jsonl" for i in range(files)]
        for target in targets:
            target.touch()
        serve = Serve(tree, work / "state", "--rescan-seconds", "5")
        try:
            base = float(truth["totals"]["requests"])
            poll(lambda: serve.requests() == base, 30, "base tree counted")
            shared = Shared()
            url = serve.url + "/metrics"
            threads = [threading.Thread(target=_scraper, args=(url, shared), daemon=True)
                       for _ in range(scrapers)]
            threads.append(threading.Thread(target=_writer, args=(targets, rate, shared,
                                                                  same_time), daemon=True))
            started = time.perf_counter()
            for t in threads:
                t.start()
            shared.stop.wait(seconds)  # the bounded run time
            shared.stop.set()
            for t in threads:
                t.join(timeout=60)
            elapsed = time.perf_counter() - started
            appended = shared.appends[-1][1] if shared.appends else 0

            def caught_up() -> bool:
                return serve.requests() == base + appended

            poll(caught_up, 60, "all appended requests visible")
            fams = serve.scrape()
            exact = (
                total(fams, "claude_code_requests") == base + appended
                and total(fams, "claude_code_tokens", type="output")
                == truth["totals"]["output_tokens"] + shared.output_tokens
                and total(fams, "claude_code_exporter_lines", result="duplicate")
                >= 2 * appended
            )
            lat = [end - start for start, end, _ in shared.scrapes]
            visible = _visible_latencies(shared, base)
        finally:
            stopped = serve.stop()
        return {
            "seconds": round(elapsed, 2), "scrapers": scrapers, "target_lines_per_s": rate,
            "scrapes": len(shared.scrapes), "scrape_errors": len(shared.errors),
            "error_samples": shared.errors[:5],
            "scrapes_per_s": round(len(shared.scrapes) / elapsed, 1),
            "scrape_ms": {"p50": round(pct(lat, 50) * 1000, 1),
                          "p99": round(pct(lat, 99) * 1000, 1),
                          "max": round(max(lat, default=0) * 1000, 1)},
            "lines_written": shared.lines, "lines_per_s": round(shared.lines / elapsed),
            "mb_per_s": round(shared.bytes / elapsed / 1e6, 2), "requests_appended": appended,
            "visible_ms": {"p50": round(pct(visible, 50) * 1000, 1),
                           "p99": round(pct(visible, 99) * 1000, 1),
                           "max": round(max(visible, default=0) * 1000, 1),
                           "samples": len(visible)},
            "exact_totals": exact, "exit_code": stopped,
        }
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    """Command line: run once and print the figures as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--scrapers", type=int, default=16)
    ap.add_argument("--rate", type=float, default=3000.0, help="lines per second to append")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--same-timestamp", action="store_true",
                    help="every request at one fixed time (the workload measured before)")
    args = ap.parse_args()
    print(json.dumps(run(args.seconds, args.scrapers, args.rate, args.files,
                         same_time=args.same_timestamp), indent=2))


if __name__ == "__main__":
    main()
