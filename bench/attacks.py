"""Issue 13's attacks at full size, against a real `serve` or `report`, with figures.

Usage: python3 -m bench.attacks NAME [options]; NAME is one of
  many-files    100,000 one-line files in 10,000 dirs; one file gets 2 lines/s
  growing-line  a 200 MB line without a newline, growing 2 kB/s
  long-line     `report` over a 1 GiB line without a newline
  header-flood  100 requests of 98 headers x 64 kB, before basic auth
  slowloris     300 connections trickling a byte every 8 s, 16 scrapes
Each prints one JSON object. Loopback only; bounded in time. Run with
PYTHONPATH pointing at another checkout to measure that code instead.
Processes run in the unit's limits (MemoryMax=2G, TasksMax=256) when this
machine allows cgroups (see tests/support/hardening.Cgroup).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import OUT
from tests.support.exposition import total
from tests.support.hardening import Cgroup, Slowloris, peak_rss, threads
from tests.support.paths import ROOT
from tests.support.process import Serve
from tests.support.records import assistant, jsonl

MB = 1024 * 1024
UNIT_MEMORY = 2 * 1024 * MB
UNIT_TASKS = 256


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait(check: Callable[[], bool], seconds: float) -> float:
    """Seconds until ``check`` holds (polled every 10 ms), or the bound itself."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if check():
            break
        time.sleep(0.01)  # polling interval inside a deadline loop
    return time.monotonic() - start


def _counts(serve: Serve, want: float) -> Callable[[], bool]:
    """A check that ``serve`` counts at least ``want`` requests."""
    return lambda: total(serve.scrape(), "claude_code_requests") >= want


def _many_files(args: argparse.Namespace, work: Path, group: Cgroup) -> dict[str, Any]:
    tree = OUT / f"many-{args.files}-in-{args.dirs}"
    if not (tree / "done").exists():
        shutil.rmtree(tree, ignore_errors=True)
        for d in range(args.dirs):
            where = tree / "projects" / f"-p{d % 100}" / f"s{d}"
            where.mkdir(parents=True)
            for f in range(args.files // args.dirs):
                (where / f"a{f}.jsonl").write_bytes(jsonl(assistant(f"m{d}_{f}", f"r{d}_{f}")))
        (tree / "done").write_text("")
    data = work / "tree"
    shutil.copytree(tree / "projects", data / "projects")
    serve = Serve(data, work / "state", prefix=group.prefix, logs=work)
    try:
        target = next((data / "projects").glob("*/s0/a0.jsonl"))
        seen = total(serve.scrape(), "claude_code_requests")
        cpu0, start, visible = _cpu_seconds(serve.proc.pid), time.monotonic(), []
        while time.monotonic() - start < args.seconds:
            with target.open("ab") as fh:
                fh.write(jsonl(assistant(f"live{seen}", "rl")))
            seen += 1
            visible.append(_wait(_counts(serve, seen), 10))
            time.sleep(max(0.0, 1 / args.rate - visible[-1]))  # the writer's pace
        cpu = _cpu_seconds(serve.proc.pid) - cpu0
        return {"files": args.files, "dirs": args.dirs, "lines": len(visible),
                "serve_cpu_pct": round(100 * cpu / (time.monotonic() - start), 1),
                "visible_p50_s": round(statistics.median(visible), 3),
                "visible_max_s": round(max(visible), 3)}
    finally:
        serve.stop()


def _growing_line(args: argparse.Namespace, work: Path, group: Cgroup) -> dict[str, Any]:
    data = work / "tree" / "projects" / "-p"
    data.mkdir(parents=True)
    grow = data / "grow.jsonl"
    with grow.open("wb") as fh:
        fh.write(jsonl(assistant("m0", "r0")))
        fh.truncate(args.mb * MB)  # sparse: no disk, no newline
    serve = Serve(data.parent, work / "state", prefix=group.prefix, logs=work)
    try:
        cpu0, start = _cpu_seconds(serve.proc.pid), time.monotonic()
        while time.monotonic() - start < args.seconds:
            with grow.open("ab") as fh:
                fh.write(b"x" * args.rate)
            time.sleep(1.0)  # the writer's pace: one append a second
        cpu = _cpu_seconds(serve.proc.pid) - cpu0
        with grow.open("ab") as fh:
            fh.write(b"\n" + jsonl(assistant("m1", "r1")))
        took = _wait(lambda: total(serve.scrape(), "claude_code_requests") >= 2, 60)
        fams = serve.scrape()
        return {"line_mb": args.mb, "grows_bytes_per_s": args.rate,
                "serve_cpu_pct": round(100 * cpu / args.seconds, 1),
                "peak_rss_mb": round(peak_rss(serve.proc.pid) / MB),
                "after_newline_visible_s": round(took, 2),
                "too_long": total(fams, "claude_code_exporter_rejected_lines", reason="too_long")}
    finally:
        serve.stop()


def _long_line(args: argparse.Namespace, work: Path, group: Cgroup) -> dict[str, Any]:
    data = work / "tree" / "projects" / "-p"
    data.mkdir(parents=True)
    (data / "ok.jsonl").write_bytes(jsonl(assistant("m0", "r0")))
    with (data / "huge.jsonl").open("wb") as fh:
        fh.truncate(args.gib * 1024 * MB)
    cmd = [*group.prefix, sys.executable, "-m", "exporter", "report", "--json",
           "--data-dir", str(data.parent), "--state-dir", str(work / "state"),
           "--log-level", "error"]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False,
                          timeout=600)
    # The largest of this process's waited-for descendants: the report and its workers.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    requests = json.loads(proc.stdout)["totals"]["requests"] if proc.returncode == 0 else None
    return {"line_gib": args.gib, "exit": proc.returncode, "requests": requests,
            "wall_s": round(time.monotonic() - start, 2), "peak_rss_mb": round(peak),
            "oom_kills": group.oom_kills()}


def _header_flood(args: argparse.Namespace, work: Path, group: Cgroup) -> dict[str, Any]:
    data = work / "tree" / "projects" / "-p"
    data.mkdir(parents=True)
    (data / "ok.jsonl").write_bytes(jsonl(assistant("m0", "r0")))
    serve = Serve(data.parent, work / "state", "--basic-auth-user", "prom", prefix=group.prefix,
                  env={"CLAUDE_CODE_EXPORTER_BASIC_AUTH_PASSWORD": "pw"}, auth=("prom", "pw"),
                  logs=work)
    try:
        before = peak_rss(serve.proc.pid)
        pad = b"a" * args.size
        flood = (b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                 + b"".join(b"X-Pad-%03d: %s\r\n" % (i, pad) for i in range(args.headers))
                 + b"\r\n")
        replies: list[str] = []

        def attack() -> None:
            try:
                with socket.create_connection(("127.0.0.1", serve.port), timeout=60) as sock:
                    sock.sendall(flood)
                    replies.append(sock.recv(64).split(b"\r\n")[0].decode() or "closed")
            except OSError as exc:
                replies.append(type(exc).__name__)

        start = time.monotonic()
        attackers = [threading.Thread(target=attack) for _ in range(args.requests)]
        for t in attackers:
            t.start()
        for t in attackers:
            t.join(timeout=300)
        alive = serve.proc.poll() is None
        return {"requests": args.requests, "header_bytes": args.headers * args.size,
                "seconds": round(time.monotonic() - start, 2), "alive": alive,
                "rss_before_mb": round(before / MB),
                "peak_rss_mb": round(peak_rss(serve.proc.pid) / MB) if alive else None,
                "oom_kills": group.oom_kills(),
                "replies": {r: replies.count(r) for r in sorted(set(replies))}}
    finally:
        serve.kill9()


def _slowloris(args: argparse.Namespace, work: Path, group: Cgroup) -> dict[str, Any]:
    data = work / "tree" / "projects" / "-p"
    data.mkdir(parents=True)
    (data / "ok.jsonl").write_bytes(jsonl(assistant("m0", "r0")))
    serve = Serve(data.parent, work / "state", prefix=group.prefix, logs=work)
    attack = Slowloris(serve.port, args.connections, interval=args.interval)
    try:
        attack.thread.start()
        _wait(lambda: attack.ticks >= 2, 60)
        ok, most, spent = 0, 0, []
        for _ in range(args.scrapes):
            most = max(most, threads(serve.proc.pid))
            start = time.monotonic()
            try:
                with urllib.request.urlopen(serve.url + "/metrics", timeout=10) as resp:
                    ok += resp.status == 200
            except OSError:
                pass
            spent.append(time.monotonic() - start)
            time.sleep(max(0.0, args.seconds / args.scrapes - spent[-1]))  # spread the scrapes
        return {"connections": args.connections, "scrapes_ok": ok, "scrapes": args.scrapes,
                "scrape_max_s": round(max(spent), 2), "max_threads": most,
                "tasks_limit": UNIT_TASKS if group.prefix else None}
    finally:
        attack.stop.set()
        attack.thread.join(timeout=30)
        serve.kill9()


ATTACKS = {"many-files": _many_files, "growing-line": _growing_line, "long-line": _long_line,
           "header-flood": _header_flood, "slowloris": _slowloris}


def main() -> None:
    """Run one attack and print its figures as JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("attack", choices=sorted(ATTACKS))
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--dirs", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=2.0, help="lines/s, or bytes/s (growing-line)")
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--gib", type=int, default=1)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--headers", type=int, default=98)
    ap.add_argument("--size", type=int, default=65_000)
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--interval", type=float, default=8.0, help="slowloris: seconds per byte")
    ap.add_argument("--scrapes", type=int, default=16)
    args = ap.parse_args()
    if args.attack == "growing-line" and args.rate == 2.0:
        args.rate = 2048
    group = Cgroup(args.attack, memory=UNIT_MEMORY, tasks=UNIT_TASKS)
    work = Path(tempfile.mkdtemp(prefix="bench-attack-"))
    try:
        print(json.dumps({"attack": args.attack, **ATTACKS[args.attack](args, work, group)}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        group.close()


if __name__ == "__main__":
    main()
