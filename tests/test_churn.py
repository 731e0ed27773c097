"""Crash and churn over a running daemon process: kill -9, rewrites, permissions, full disks.

Every test ends on the generator's exact truth (or a stated, exact deviation
from it): whatever happened on the way, nothing is lost and nothing counted twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.ingest.discover import find_transcripts
from exporter.ingest.parse import parse_lines
from exporter.ledger.lock import WriterLock
from exporter.sqlite import sqlite3
from exporter.synth import GenOptions, generate
from tests.support.exposition import total
from tests.support.figures import assert_matches
from tests.support.hardening import (
    can_drop_dac,
    check_against_truth,
    integrity,
    ledger_counter,
    ledger_report,
)
from tests.support.paths import ROOT
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll

FAST = ("--rescan-seconds", "0.5")


def _exact(serve: Serve, truth: dict[str, Any], deadline: float = 60) -> dict[str, Any]:
    """Poll until a scrape equals the truth; return that scrape."""
    last: list[str] = []

    def check() -> dict[str, Any] | None:
        fams = serve.scrape()
        last[:] = check_against_truth(fams, truth)
        return None if last else fams

    try:
        return poll(check, deadline, "scrape equal to the truth")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; differences: {last}; log tail: {serve.log()[-2000:]}"
                             ) from None


def _transcripts(root: Path) -> list[Path]:
    return [Path(p) for p in find_transcripts([root / "projects"])]


# ------------------------------------------------------------------------- kill -9
def _holds(state: Path, pid: int) -> bool:
    """Whether process ``pid`` holds the writer lock of the ledger in ``state``."""
    holder = WriterLock.holder(state / "ledger.sqlite3")
    return holder is not None and holder.pid == pid


def test_kill9_at_random_points_while_appending_then_exact(
    tmp_path: Path, record_property: Any
) -> None:
    """Rounds of appends cut mid-line, each ending in kill -9, then the exact truth."""
    src, live, state = tmp_path / "src", tmp_path / "live", tmp_path / "state"
    truth = generate(src, GenOptions(seed=21, sessions=8, requests_per_session=120,
                                     target_bytes=10_000_000))
    files = {p: p.read_bytes() for p in _transcripts(src)}
    rng = random.Random(21)
    rounds = int(os.environ.get("HARDENING_KILL_ROUNDS", "10"))  # scaled up for long runs
    # Each file is cut at random byte offsets: most cuts fall inside a line.
    cuts = {p: sorted(rng.sample(range(1, len(d)), min(rounds - 1, len(d) - 1)))
            for p, d in files.items()}
    done = dict.fromkeys(files, 0)
    partial = 0

    def append(upto: int) -> None:
        for p, data in files.items():
            end = cuts[p][upto] if upto < len(cuts[p]) else len(data)
            dest = live / p.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with dest.open("ab") as fh:
                fh.write(data[done[p] : end])
            done[p] = end

    for r in range(rounds):
        during = r % 2 == 1  # odd rounds: append while the daemon follows
        if not during:
            append(r)
        serve = Serve(live, state, "--batch-mb", "0.05", "--workers", "1", *FAST, wait=False)
        # The random moment counts from the ledger's opening, not the process start: on a
        # loaded machine the imports alone outlasted every wait, and no kill reached the ledger.
        def started(run: Serve = serve) -> bool:
            return run.proc.poll() is not None or _holds(state, run.proc.pid)

        poll(started, 60, "the daemon holding the ledger", interval=0.005)
        try:
            serve.proc.wait(timeout=rng.uniform(0.0, 0.6))
        except subprocess.TimeoutExpired:
            if during:
                append(r)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    serve.proc.wait(timeout=rng.uniform(0.0, 0.6))
        assert serve.proc.poll() is None, serve.log()  # it must still be running: kill it
        serve.kill9()
        if (state / "ledger.sqlite3").exists():
            on_disk = sum(p.stat().st_size for p in _transcripts(live))
            partial += ledger_counter(state, "bytes_read") < on_disk
    assert sum(done.values()) == sum(len(d) for d in files.values())
    record_property("kills", rounds)
    record_property("kills_mid_ingest", partial)
    assert partial >= 3, f"only {partial} kills interrupted an ingest: nothing was tested"
    final = Serve(live, state, *FAST)
    try:
        _exact(final, truth)
    finally:
        assert final.stop() == 0
    assert integrity(state) == "ok"
    assert_matches(ledger_report(state, live), truth)


# ------------------------------------------------------------------------- churn
def _rejected_in(data: bytes) -> int:
    return sum(parse_lines(data[: data.rfind(b"\n") + 1]).counts.rejected.values())


def test_truncate_replace_delete_under_a_running_daemon(tmp_path: Path) -> None:
    """Truncation, in-place rewrite, rename-replace and deletion lose and double nothing."""
    tree, state = tmp_path / "tree", tmp_path / "state"
    truth = generate(tree, GenOptions(seed=31, sessions=6, requests_per_session=60))
    serve = Serve(tree, state, *FAST)
    try:
        _exact(serve, truth)
        mains = sorted(p for p in _transcripts(tree) if "subagents" not in str(p))
        rewritten, renamed, deleted, halved, grown = mains[:5]
        reread = 0
        # In place: empty the file, then write the same bytes back (same inode).
        data = rewritten.read_bytes()
        rewritten.write_bytes(b"")
        rewritten.write_bytes(data)
        reread += _rejected_in(data)
        # Rename over it: a new inode with the same content.
        data = renamed.read_bytes()
        (renamed.parent / "tmp.part").write_bytes(data)
        os.replace(renamed.parent / "tmp.part", renamed)
        reread += _rejected_in(data)
        deleted.unlink()
        data = halved.read_bytes()
        cut = data.rfind(b"\n", 0, len(data) // 2) + 1
        with halved.open("r+b") as fh:
            fh.truncate(cut)
        reread += _rejected_in(data[:cut])
        extra = [assistant(f"msg_churn_{i}", f"req_churn_{i}", model="claude-churn-test",
                           usage={"input_tokens": 10 + i, "output_tokens": 100})
                 for i in range(25)]
        data = grown.read_bytes() + jsonl(*extra)
        (grown.parent / "tmp.part").write_bytes(data)
        os.replace(grown.parent / "tmp.part", grown)
        reread += _rejected_in(data)
        want_requests = truth["totals"]["requests"] + 25
        fams = poll(lambda: (f := serve.scrape()) and total(f, "claude_code_requests")
                    == want_requests and f, 30, "grown file counted")
        assert total(fams, "claude_code_tokens", type="input") == (
            truth["totals"]["input_tokens"] + sum(10 + i for i in range(25)))
        assert total(fams, "claude_code_tokens", type="output") == (
            truth["totals"]["output_tokens"] + 2500)
        rejected = total(fams, "claude_code_exporter_lines", result="rejected")
        # Re-read lines are counted again as lines; a re-read of the rewritten file may be
        # skipped when the daemon never saw it empty (same bytes: nothing is lost).
        assert truth["rejected_lines"] <= rejected <= truth["rejected_lines"] + reread
    finally:
        assert serve.stop() == 0
    got = ledger_report(state, tree)
    for model, figures in truth["by_model"].items():
        assert_matches(got["by_model"][model], figures, f"/by_model/{model}")
    assert got["by_model"]["claude-churn-test"]["requests"] == 25
    assert got["totals"]["requests"] == want_requests


POISON = [
    b'{"type":"user","x":' + b"[" * 50_000 + b"]" * 50_000 + b"}",  # deeper than the stack
    b'{"type":"assistant","message":{"id":"p","usage":{"input_tokens":null,"output_tokens"',
    b'{"type":"assistant","message":{"id":"q","usage":{"input_tokens":' + b"9" * 5000 + b"}}}",
    b'{"type":"user","x":"\xff\x00"}', b"\x00" * 100, b"[" * 3000,
]


def test_poison_lines_never_stop_ingestion(tmp_path: Path) -> None:
    """Lines that once crashed the parser are counted as rejected; later lines still count."""
    tree, state = tmp_path / "tree", tmp_path / "state"
    truth = generate(tree, GenOptions(seed=33, sessions=2, requests_per_session=30))
    serve = Serve(tree, state, *FAST)
    try:
        _exact(serve, truth)
        live = sorted(_transcripts(tree))[0]
        with live.open("ab") as fh:
            fh.write(b"".join(line + b"\n" for line in POISON))
            fh.write(jsonl(assistant("msg_after_poison", "req_after_poison")))
        poll(lambda: serve.requests() == truth["totals"]["requests"] + 1, 20, "line after poison")
        fams = serve.scrape()
        assert total(fams, "claude_code_exporter_lines", result="rejected") == (
            truth["rejected_lines"] + len(POISON))
        assert serve.health()[0] == 200
        assert not [e for e in serve.events() if e.get("event") == "pass_failed"]
    finally:
        assert serve.stop() == 0


# ------------------------------------------------------------------------- permissions
@pytest.fixture
def no_dac() -> list[str]:
    """A command prefix under which file modes apply (root drops its DAC capabilities)."""
    prefix = can_drop_dac()
    if prefix is None:
        pytest.skip("running as root and cannot drop CAP_DAC_OVERRIDE (no setpriv)")
    return prefix


def test_permission_denied_files_and_dirs_are_reported_then_picked_up(
    tmp_path: Path, no_dac: list[str]
) -> None:
    """Unreadable files/dirs are logged, not fatal, and counted once readable again."""
    tree, state = tmp_path / "tree", tmp_path / "state"
    truth = generate(tree, GenOptions(seed=41, sessions=4, requests_per_session=50))
    mains = sorted(p for p in _transcripts(tree) if "subagents" not in str(p))
    locked_file = mains[0]
    locked_dir = next(p.parent for p in _transcripts(tree) if p.parent.name == "subagents")
    locked_file.chmod(0)
    locked_dir.chmod(0)
    serve = Serve(tree, state, *FAST, prefix=no_dac)
    try:
        poll(lambda: {"transcript_unreadable", "transcript_dir_unreadable"}
             <= {e.get("event") for e in serve.events()}, 20, "permission warnings")
        assert serve.health()[0] == 200
        assert serve.requests() < truth["totals"]["requests"]
        events = [e for e in serve.events() if e.get("event") == "transcript_unreadable"]
        assert any(e["path"] == str(locked_file) and "denied" in e["detail"] for e in events)
        locked_file.chmod(0o644)
        locked_dir.chmod(0o755)
        _exact(serve, truth)
    finally:
        locked_file.chmod(0o644)
        locked_dir.chmod(0o755)
        assert serve.stop() == 0
    # A state directory the process may not write: a clear error, exit 3.
    ro_state = tmp_path / "ro-state"
    ro_state.mkdir()
    ro_state.chmod(0o555)
    denied = Serve(tree, ro_state, prefix=no_dac, wait=False)
    assert denied.proc.wait(timeout=60) == 3
    assert "cannot open ledger" in denied.log() and "Permission denied" in denied.log()
    assert list(ro_state.iterdir()) == []


# ------------------------------------------------------------------------- odd files
def test_symlink_loops_fifos_and_devices_do_not_hang_or_count(tmp_path: Path) -> None:
    """Link loops, a FIFO, a device and a dangling link named *.jsonl: daemon stays exact."""
    tree, state = tmp_path / "tree", tmp_path / "state"
    truth = generate(tree, GenOptions(seed=51, sessions=3, requests_per_session=40))
    projects = tree / "projects"
    proj = sorted(p for p in projects.iterdir() if p.is_dir())[0]
    (projects / "loop").symlink_to(projects, target_is_directory=True)
    (proj / "up").symlink_to("..", target_is_directory=True)
    (proj / "self.jsonl").symlink_to("self.jsonl")
    (proj / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    (proj / "zero.jsonl").symlink_to("/dev/zero")
    os.mkfifo(proj / "fifo.jsonl")
    first = _transcripts(tree)[0]
    (proj / "twin.jsonl").symlink_to(first)  # a second name for a file: counted once
    serve = Serve(tree, state, *FAST)
    try:
        _exact(serve, truth)
        (proj / "late.jsonl").write_bytes(jsonl(assistant("msg_late", "req_late")))
        poll(lambda: serve.requests() == truth["totals"]["requests"] + 1, 20, "late file")
        assert serve.health()[0] == 200
        unreadable = {e["path"] for e in serve.events() if e.get("event") ==
                      "transcript_unreadable"}
        assert str(proj / "fifo.jsonl") in unreadable
    finally:
        assert serve.stop() == 0


# ------------------------------------------------------------------------- late root
def test_root_created_after_start_is_picked_up(tmp_path: Path) -> None:
    """A --data-dir missing at start is read once it appears: its projects/ only, exactly."""
    root, state = tmp_path / "later" / "claude", tmp_path / "state"
    serve = Serve(root, state, *FAST)
    try:
        assert serve.health()[0] == 200
        assert serve.requests() == 0
        staging = tmp_path / "staging"
        truth = generate(staging, GenOptions(seed=61, sessions=4, requests_per_session=50))
        # A config root also holds Claude Code's prompt history: not a transcript.
        (staging / "history.jsonl").write_bytes(b'{"display":"a prompt","project":"/x"}\n' * 5)
        root.parent.mkdir()
        shutil.copytree(staging, root)
        fams = _exact(serve, truth, 30)
        control = Serve(root, tmp_path / "control-state")
        try:
            want = _exact(control, truth, 30)
            for result in ("usage", "duplicate", "other", "rejected"):
                assert total(fams, "claude_code_exporter_lines", result=result) == total(
                    want, "claude_code_exporter_lines", result=result), result
        finally:
            assert control.stop() == 0
        more = [assistant(f"msg_after_{i}", f"req_after_{i}") for i in range(3)]
        target = sorted(_transcripts(root))[0]
        with target.open("ab") as fh:
            fh.write(jsonl(*more))
        poll(lambda: serve.requests() == truth["totals"]["requests"] + 3, 20, "appended")
        assert any(e.get("event") == "watching" for e in serve.events())
    finally:
        assert serve.stop() == 0


# ------------------------------------------------------------------------- full disk
@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs (root only), unmounted afterwards: a ledger of a few files fits, not more."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0755", "tmpfs",
                           str(mnt)], capture_output=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("how", ["tmpfs", "rlimit"])
def test_disk_full_on_the_state_dir_fails_clearly_then_recovers_exactly(
    tmp_path: Path, how: str, request: pytest.FixtureRequest
) -> None:
    """A full state disk: start-up exits 3; while following, 503 and retries; no corruption."""
    src = tmp_path / "src"
    truth = generate(src, GenOptions(seed=71, sessions=10, requests_per_session=250,
                                     target_bytes=8_000_000))
    base = request.getfixturevalue("small_fs") if how == "tmpfs" else tmp_path
    prefix: list[str] = []
    if how == "rlimit":  # no file the process writes may grow past 3 MB
        if shutil.which("prlimit") is None:
            pytest.skip("no prlimit(1) to start a process with RLIMIT_FSIZE")
        prefix = [str(shutil.which("prlimit")), "--fsize=3000000:unlimited"]
    # 1. Start-up with everything to ingest: the first pass cannot commit → exit 3.
    starved = Serve(src, base / "state1", "--batch-mb", "0.2", wait=False, prefix=prefix,
                    logs=tmp_path)
    assert starved.proc.wait(timeout=60) == 3
    assert "ledger_unusable" in starved.log(), starved.log()
    assert "Traceback" not in starved.log(), starved.log()
    assert integrity(base / "state1") == "ok"
    shutil.rmtree(base / "state1")
    # 2. Following: start on a small part, then add the rest while the disk is full.
    state, live = base / "state", tmp_path / "live"
    for p in _transcripts(src)[:2]:
        (live / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, live / p.relative_to(src))
    serve = Serve(live, state, "--batch-mb", "0.2", *FAST, prefix=prefix, logs=tmp_path)
    try:
        shutil.copytree(src / "projects", live / "projects", dirs_exist_ok=True)

        def unhealthy() -> dict[str, Any] | None:
            status, doc = serve.health()
            return doc if status == 503 else None

        doc = poll(unhealthy, 30, "503 when full")
        assert doc["ledger_ok"] is False and doc["error"], doc
        failed = [e for e in serve.events() if e.get("event") == "pass_failed"]
        assert failed and all(e["kind"] == "LedgerError" for e in failed), failed[:3]
        assert serve.scrape()  # still serving the figures it has
        if how == "tmpfs":
            subprocess.run(["mount", "-o", "remount,size=64m", str(base)], check=True)
        else:
            resource.prlimit(serve.proc.pid, resource.RLIMIT_FSIZE,
                             (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        _exact(serve, truth)
        poll(lambda: serve.health()[0] == 200, 10, "healthy again")
    finally:
        assert serve.stop() == 0
    assert integrity(state) == "ok"
    assert_matches(ledger_report(state, live), truth)


# ------------------------------------------------------------------------- bad ledgers
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _good_ledger(tmp_path: Path, tree: Path) -> Path:
    state = tmp_path / "made"
    subprocess.run([sys.executable, "-m", "exporter", "report", "--json", "--data-dir",
                    str(tree), "--state-dir", str(state)], cwd=ROOT, check=True,
                   capture_output=True, timeout=120)
    return state / "ledger.sqlite3"


def _foreign(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (t TEXT)")
    con.execute("INSERT INTO notes VALUES ('someone else''s data')")
    con.commit()
    con.close()


def _future(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version=99")
    con.close()


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    page = 4096
    for at in range(page * 2, len(data) - 64, page * 3):  # scribble over every third page
        data[at + 8 : at + 200] = b"\xab" * 192
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("kind", "message"),
    [("garbage", "not a database"), ("foreign", "another program"),
     ("corrupt", "malformed|corrupt"), ("truncated", "malformed|corrupt"),
     ("future", "schema version")],
)
@pytest.mark.parametrize("command", ["serve", "report"])
def test_bad_ledger_is_refused_untouched(tmp_path: Path, kind: str, message: str,
                                         command: str) -> None:
    """A foreign, corrupt, truncated or newer ledger: exit 3, clear message, bytes unchanged."""
    import re

    tree = tmp_path / "tree"
    generate(tree, GenOptions(seed=81, sessions=2, requests_per_session=30))
    state = tmp_path / "state"
    state.mkdir()
    ledger = state / "ledger.sqlite3"
    if kind == "garbage":
        ledger.write_bytes(random.Random(1).randbytes(50_000))
    elif kind == "foreign":
        _foreign(ledger)
    else:
        made = _good_ledger(tmp_path, tree)
        shutil.copy(made, ledger)
        if kind == "corrupt":
            _corrupt(ledger)
        elif kind == "truncated":
            with ledger.open("r+b") as fh:
                fh.truncate(ledger.stat().st_size // 2 // 4096 * 4096 + 100)
        else:
            _future(ledger)
    before, listing = _digest(ledger), sorted(os.listdir(state))
    args = [sys.executable, "-m", "exporter", command, "--data-dir", str(tree),
            "--state-dir", str(state), "--log-format", "json"]
    if command == "serve":
        args += ["--listen", "127.0.0.1:0"]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    assert re.search(message, proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr
    assert _digest(ledger) == before, "the ledger file was modified"
    assert sorted(os.listdir(state)) == listing, "files were left next to the ledger"
