"""Issue 13's attacks on real processes: each one once stopped ingestion or the daemon.

Every test runs ``claude-code-exporter`` as a process over real files, on
loopback, with the limits a systemd unit would set (a memory cgroup for
MemoryMax, a pids cgroup for TasksMax) when this machine allows cgroups;
otherwise with an address-space limit, or with the process's own peak
figures from /proc alone. docs/reliability.md gives the figures and the
commands that reproduce each attack at full size.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.exposition import total
from tests.support.hardening import Cgroup, Slowloris, children, peak_rss, remove_tree, threads
from tests.support.paths import ROOT
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll

MB = 1024 * 1024
FAST = ("--rescan-seconds", "30")  # the default: a test must not pass thanks to the rescan


def _tree(root: Path, n: int = 3, **kw: Any) -> Path:
    """A projects dir with one session of ``n`` requests (the argument for --data-dir)."""
    where = root / "projects" / "-home-u-p"
    where.mkdir(parents=True, exist_ok=True)
    (where / "s1.jsonl").write_bytes(jsonl(*(assistant(f"m{i}", f"r{i}", **kw)
                                             for i in range(n))))
    return root / "projects"


def _report(data: Path, state: Path, *prefix: str, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """``report --json`` as a process (optionally under a prefix such as a cgroup)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "exporter", "report", "--json", "--data-dir",
         str(data), "--state-dir", str(state), "--log-format", "json"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
        env={**os.environ, **(env or {})},
    )


def _address_space(limit: int) -> list[str]:
    """A prefix capping the address space, when there is no cgroup (empty: no prlimit)."""
    prlimit = shutil.which("prlimit")
    return [prlimit, f"--as={limit}"] if prlimit else []


def _events(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


@pytest.fixture
def cgroups() -> Iterator[list[Cgroup]]:
    """Cgroups a test made, removed afterwards."""
    made: list[Cgroup] = []
    yield made
    for group in made:
        group.close()


# ---- item 5: file names that are not UTF-8 ------------------------------------------
def test_names_that_are_not_utf8_neither_stop_start_up_nor_passes(tmp_path: Path) -> None:
    """A Latin-1 name: report counts it (was exit 2), serve follows it (was a failed pass)."""
    data = _tree(tmp_path / "t")
    odd = os.path.join(os.fsencode(data / "-home-u-p"), b"caf\xe9.jsonl")
    with open(odd, "wb") as fh:
        fh.write(jsonl(assistant("odd1", "ro1")))
    proc = _report(data, tmp_path / "rstate")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["totals"]["requests"] == 4
    serve = Serve(data, tmp_path / "state", *FAST)
    try:
        assert serve.requests() == 4
        with open(odd, "ab") as fh:
            fh.write(jsonl(assistant("odd2", "ro2")))
        poll(lambda: serve.requests() == 5, 15, "append to the odd file counted")
        other = os.path.join(os.fsencode(data / "-home-u-p"), b"\xff\xfe.jsonl")
        with open(other, "wb") as fh:
            fh.write(jsonl(assistant("odd3", "ro3")))
        poll(lambda: serve.requests() == 6, 15, "a second odd file counted")
        status, doc = serve.health()
        assert status == 200 and doc["watcher_alive"], doc
        kinds = {e.get("event") for e in serve.events()}
        assert "pass_failed" not in kinds and "watcher_failed" not in kinds, kinds
    finally:
        assert serve.stop() == 0


# ---- item 6: very deep directories ----------------------------------------------------
def test_990_levels_of_directories_do_not_stop_ingestion(tmp_path: Path) -> None:
    """A tree 990 levels deep: exit 0 and counted (was RecursionError, exit 1)."""
    data = _tree(tmp_path / "t")
    fd = os.open(data, os.O_RDONLY)
    try:
        for _ in range(990):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open("deep.jsonl", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)
    try:
        proc = _report(data, tmp_path / "rstate")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(proc.stdout)["totals"]["requests"] == 3
        assert any(e["event"] == "transcript_dirs_too_deep" for e in _events(proc.stderr))
        serve = Serve(data, tmp_path / "state", *FAST)
        try:
            with (data / "-home-u-p" / "s1.jsonl").open("ab") as fh:
                fh.write(jsonl(assistant("m9", "r9")))
            poll(lambda: serve.requests() == 4, 15, "append beside the deep tree counted")
            assert serve.health()[0] == 200
        finally:
            assert serve.stop() == 0
    finally:
        remove_tree(data / "d")  # pytest's own clean-up recurses, and would fail on it later


# ---- item 7: header flood before auth -------------------------------------------------
def test_header_flood_before_auth_keeps_memory_bounded(
    tmp_path: Path, cgroups: list[Cgroup],
) -> None:
    """100 requests of 98 x 64 kB headers at once: 431s, no OOM (was 51 MB -> 2.4 GB)."""
    group = Cgroup("flood", memory=400 * MB)
    cgroups.append(group)
    password = "flood-pw"
    serve = Serve(_tree(tmp_path / "t"), tmp_path / "state", *FAST, "--basic-auth-user", "prom",
                  env={"CLAUDE_CODE_EXPORTER_BASIC_AUTH_PASSWORD": password},
                  auth=("prom", password), prefix=group.prefix)
    try:
        before = peak_rss(serve.proc.pid)
        pad = b"a" * 65_000
        flood = (b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                 + b"".join(b"X-Pad-%02d: %s\r\n" % (i, pad) for i in range(98)) + b"\r\n")
        replies: list[bytes] = []
        lock = threading.Lock()

        def attack() -> None:
            got = b""
            try:
                with socket.create_connection(("127.0.0.1", serve.port), timeout=30) as sock:
                    sock.sendall(flood)
                    got = sock.recv(64)
            except OSError:
                pass  # cut off mid-send: what a bounded server does to this client
            with lock:
                replies.append(got)

        attackers = [threading.Thread(target=attack) for _ in range(100)]
        for t in attackers:
            t.start()
        for t in attackers:
            t.join(timeout=120)
        assert len(replies) == 100 and serve.proc.poll() is None, serve.log()[-2000:]
        assert group.oom_kills() == 0
        grown = peak_rss(serve.proc.pid) - before
        assert grown < 100 * MB, f"peak RSS grew by {grown / MB:.0f} MB"
        assert not any(r.startswith(b"HTTP/1.0 200") for r in replies)
        status, body = serve.get("/metrics")
        assert status == 200 and b"claude_code_requests_total" in body
    finally:
        assert serve.stop() == 0


# ---- item 8: a line of 1 GiB without a newline ----------------------------------------
def test_a_1gib_line_without_newline_is_skipped_in_bounded_memory(
    tmp_path: Path, cgroups: list[Cgroup],
) -> None:
    """Under a 400 MB limit: exit 0, other files counted; once ended, one too_long line."""
    data = _tree(tmp_path / "t")
    huge = data / "-home-u-p" / "huge.jsonl"
    with huge.open("wb") as fh:
        fh.write(jsonl(assistant("h0", "rh0")))
        fh.truncate(1024 * MB + 100)  # sparse: NUL bytes, no newline, no disk
    group = Cgroup("line", memory=400 * MB)
    cgroups.append(group)
    prefix = group.prefix or _address_space(1200 * MB)
    proc = _report(data, tmp_path / "state", *prefix)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert group.oom_kills() == 0
    assert json.loads(proc.stdout)["totals"]["requests"] == 4
    with huge.open("ab") as fh:
        fh.write(b"\n" + jsonl(assistant("h1", "rh1")))
    proc = _report(data, tmp_path / "state", *prefix)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["totals"]["requests"] == 5 and doc["rejected_by_reason"] == {"too_long": 1}


def test_the_line_limit_is_a_setting(tmp_path: Path) -> None:
    """max_line_bytes=4096: a 10 kB line is too_long, the lines around it are counted."""
    data = _tree(tmp_path / "t")
    with (data / "-home-u-p" / "s1.jsonl").open("ab") as fh:
        fh.write(jsonl(assistant("big", "rbig", pad="x" * 10_000), assistant("after", "ra")))
    proc = _report(data, tmp_path / "state", env={"CLAUDE_CODE_EXPORTER_MAX_LINE_BYTES": "4096"})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["totals"]["requests"] == 4 and doc["rejected_by_reason"] == {"too_long": 1}


# ---- item 10: slowloris under TasksMax ------------------------------------------------
def test_slowloris_under_tasksmax_leaves_scrapes_working(
    tmp_path: Path, cgroups: list[Cgroup],
) -> None:
    """300 trickling connections in a 256-task group: 16 of 16 scrapes, threads bounded."""
    group = Cgroup("slow", tasks=256)
    cgroups.append(group)
    serve = Serve(_tree(tmp_path / "t"), tmp_path / "state", *FAST, prefix=group.prefix)
    attack = Slowloris(serve.port, 300)
    most = 0
    try:
        attack.thread.start()
        poll(lambda: attack.ticks >= 8, 30, "two seconds of trickling on 300 connections")
        ok = 0
        for _ in range(16):  # one scrape per round of the attack
            tick = attack.ticks
            poll(lambda t=tick: attack.ticks > t, 10, "the next round")  # type: ignore[misc]
            most = max(most, threads(serve.proc.pid))
            try:
                with urllib.request.urlopen(serve.url + "/metrics", timeout=10) as resp:
                    ok += resp.status == 200 and b"claude_code_requests" in resp.read()
            except OSError:
                pass
        assert ok == 16, f"{ok} of 16 scrapes succeeded"
        assert most <= 2 * 64 + 16, f"{most} threads"
        assert serve.proc.poll() is None
    finally:
        attack.stop.set()
        attack.thread.join(timeout=30)
        assert serve.stop() == 0


# ---- item 11: projects/ deleted and restored ------------------------------------------
def test_projects_deleted_and_restored_is_followed_again_and_health_tells(
    tmp_path: Path,
) -> None:
    """Projects/ removed, then copied back: watcher_alive false meanwhile, then events."""
    data = _tree(tmp_path / "t")
    aside = tmp_path / "aside"
    shutil.copytree(data, aside)
    serve = Serve(data, tmp_path / "state", *FAST)
    try:
        assert serve.health()[1]["watcher_alive"] is True
        shutil.rmtree(data)
        poll(lambda: serve.health()[1]["watcher_alive"] is False, 10, "watcher reported gone")
        shutil.copytree(aside, data)  # new inodes under the same names
        poll(lambda: serve.health()[1]["watcher_alive"] is True, 10, "watched again")
        assert serve.requests() == 3  # merged by key: nothing counted twice

        def appended_and_seen() -> bool:  # the new watch may still be arming
            with (data / "-home-u-p" / "s1.jsonl").open("ab") as fh:
                fh.write(jsonl(assistant(f"n{time.monotonic_ns()}", "rn")))
            return serve.requests() > 3

        poll(appended_and_seen, 10, "a new line seen long before the 30 s rescan")
        assert serve.health()[0] == 200
    finally:
        assert serve.stop() == 0


# ---- item 13 and 15: far-future timestamps, home directories, paths in /healthz ---------
def test_far_future_lines_are_bad_timestamp_and_home_is_not_a_project(tmp_path: Path) -> None:
    """Year 9999 rejected, 2 days ahead left for later; cwd = $HOME: project '~', not 'alice'."""
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    now = time.time()
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 12 * 3600))
    ahead = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 2 * 86400))
    data = _tree(tmp_path / "t", cwd=str(home))
    # Year 9999 before a request in time: rejected. 2 days ahead at the end: perhaps our
    # clock is behind, so left for a later pass (tests/test_ingest_edges.py), not counted.
    (data / "-home-u-p" / "future.jsonl").write_bytes(jsonl(
        assistant("far", "r3", ts="9999-01-01T00:00:00Z"),
        assistant("soon", "r1", ts=soon, cwd=str(home)), assistant("ahead", "r2", ts=ahead)))
    proc = _report(data, tmp_path / "rstate")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["totals"]["requests"] == 4 and doc["rejected_by_reason"] == {"bad_timestamp": 1}
    serve = Serve(data, tmp_path / "state", *FAST, env={"HOME": str(home)})
    try:
        fams = serve.scrape()
        assert total(fams, "claude_code_requests") == 4
        projects = {s.labels.get("project") for f in fams.values() for s in f.samples}
        assert "~" in projects and "alice" not in projects, projects
        last = max(s.value for s in fams["claude_code_last_request_timestamp_seconds"].samples)
        assert last < now + 86400, last
    finally:
        assert serve.stop() == 0


def test_healthz_error_carries_no_state_path(tmp_path: Path) -> None:
    """A ledger that cannot grow: 503 with the reason and the file name, not its directory."""
    data = _tree(tmp_path / "t")
    state = tmp_path / "private-dir-name" / "state"
    serve = Serve(data, state, *FAST)
    try:
        # No file the daemon writes may grow 64 KiB past the largest ledger file (its log
        # is far smaller, so logging goes on).
        cap = max(p.stat().st_size for p in state.iterdir()) + 64 * 1024
        assert serve.log_path.stat().st_size < cap // 2
        resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE, (cap, resource.RLIM_INFINITY))
        big = data / "-home-u-p" / "big.jsonl"
        big.write_bytes(jsonl(*(assistant(f"b{i}", f"rb{i}") for i in range(3000))))

        def unhealthy() -> dict[str, Any] | None:
            status, doc = serve.health()
            return doc if status == 503 else None

        doc = poll(unhealthy, 30, "503 once the ledger cannot grow")
        assert doc["error"] and "ledger.sqlite3" in doc["error"], doc
        assert "private-dir-name" not in json.dumps(doc), doc
        resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE,
                         (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        with big.open("ab") as fh:  # an event: the failed pass is retried at once
            fh.write(jsonl(assistant("b-last", "rb-last")))
        poll(lambda: serve.requests() == 3004, 30, "caught up once the ledger can grow")
    finally:
        assert serve.stop() == 0


# ---- item 14: parser workers die with serve -------------------------------------------
def test_kill9_of_serve_takes_its_parser_workers_with_it(tmp_path: Path) -> None:
    """A kill -9 of serve mid-ingest ends its two parser processes too (were orphans)."""
    where = tmp_path / "t" / "projects" / "-p"
    where.mkdir(parents=True)
    line = jsonl(assistant("m", "r", pad="q" * 300))
    for f in range(4):  # 4 x 16 MB: above the pool's threshold, in several work units
        with (where / f"s{f}.jsonl").open("wb") as fh:
            for i in range(16 * MB // len(line)):
                fh.write(line.replace(b'"m"', b'"m%d_%d"' % (f, i), 1))
    serve = Serve(where.parent, tmp_path / "state", "--workers", "2", wait=False)
    workers: list[int] = []
    try:
        workers = poll(lambda: children(serve.proc.pid), 60, "parser workers")
        os.kill(serve.proc.pid, signal.SIGKILL)  # the daemon alone, not its process group
        serve.proc.wait(timeout=30)

        def alive() -> list[int]:
            return [p for p in workers if Path(f"/proc/{p}").exists()
                    and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]

        poll(lambda: not alive(), 10, f"workers {workers} ended")
    finally:
        for pid in workers:  # never leave an orphan behind, whatever the outcome
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        serve.kill9()
