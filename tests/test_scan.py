"""Ingestion passes over real files: exact totals, restarts, deletions, churn."""

from __future__ import annotations

import gc
import shutil
from pathlib import Path

from exporter.ingest.discover import find_transcripts, projects_dirs
from exporter.ingest.scan import Pooled, Scanner, _Batch
from exporter.ledger.store import Ledger
from tests.support.records import assistant, jsonl
from tests.support.scan import REAL_TOTALS, scanner, totals


def test_real_fixtures_match_the_readme_to_the_token(real_tree: Path, tmp_path: Path) -> None:
    """The real transcripts give the table of their README exactly."""
    scan = scanner(real_tree, tmp_path)
    scan.scan()
    assert totals(scan.ledger.requests()) == REAL_TOTALS


def test_real_fixtures_with_parallel_workers(real_tree: Path, tmp_path: Path) -> None:
    """The process pool path gives the same exact totals as the inline path."""
    scan = scanner(real_tree, tmp_path, workers=2, parallel_min_bytes=0, batch_bytes=1)
    scan.scan()
    assert totals(scan.ledger.requests()) == REAL_TOTALS
    assert scan.ledger.counters("lines")["usage"] == 529


def test_second_pass_reads_no_old_bytes(real_tree: Path, tmp_path: Path) -> None:
    """After a full pass, a new pass (new process state, same ledger) reads nothing."""
    scanner(real_tree, tmp_path).scan()
    again = scanner(real_tree, tmp_path).scan()
    assert (again.bytes_read, again.files_read, again.new_requests) == (0, 0, 0)


def test_deleted_transcripts_stay_counted(real_tree: Path, tmp_path: Path) -> None:
    """Deleting transcripts after a pass changes no total and drops their checkpoints."""
    tree = tmp_path / "tree"
    shutil.copytree(real_tree, tree)
    state = tmp_path / "state"
    scanner(tree, state).scan()
    for f in tree.rglob("*.jsonl"):
        if "subagents" in f.parts:
            f.unlink()
    scan = scanner(tree, state)
    scan.scan()
    assert totals(scan.ledger.requests()) == REAL_TOTALS
    assert all("subagents" not in p for p in scan.ledger.checkpoints())


def test_appended_lines_are_read_incrementally(tmp_path: Path) -> None:
    """Appending a streaming continuation upgrades the request, not duplicates it."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    f = proj / "s.jsonl"
    f.write_bytes(jsonl(assistant("m", usage={"output_tokens": 2})))
    scan = scanner(tmp_path, tmp_path / "st")
    scan.scan()
    with f.open("ab") as fh:
        fh.write(jsonl(assistant("m", usage={"output_tokens": 900}), assistant("n")))
    result = scan.scan()
    assert (result.new_requests, result.upgraded_requests) == (1, 1)
    assert sorted(r.output for r in scan.ledger.requests()) == [10, 900]
    assert scan.ledger.counters("lines") == {"usage": 2, "duplicate": 1}


def test_resumed_copy_in_another_file_counts_once(tmp_path: Path) -> None:
    """A resumed session replaying history under a new sessionId adds no request."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    (proj / "a.jsonl").write_bytes(
        jsonl(assistant("m1", session="A"), assistant("m2", session="A"))
    )
    (proj / "b.jsonl").write_bytes(
        jsonl(assistant("m1", session="B"), assistant("m3", session="B"))
    )
    scan = scanner(tmp_path, tmp_path / "st")
    scan.scan()
    sessions = {r.key[:2]: r.session for r in scan.ledger.requests()}
    assert sessions == {"m1": "A", "m2": "A", "m3": "B"}


def test_rewritten_file_is_not_double_counted(tmp_path: Path) -> None:
    """A transcript rewritten in place (compaction/resume) is re-read without double counting."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    f = proj / "s.jsonl"
    f.write_bytes(jsonl(assistant("m1"), assistant("m2")))
    scan = scanner(tmp_path, tmp_path / "st")
    scan.scan()
    f.write_bytes(jsonl({"type": "summary", "summary": "x"}, assistant("m2"), assistant("m3")))
    scan.scan()
    assert sorted(r.key[:2] for r in scan.ledger.requests()) == ["m1", "m2", "m3"]


def test_unreadable_file_is_reported_not_fatal(tmp_path: Path) -> None:
    """A transcript that cannot be opened (here a dangling link) is listed; the rest is read."""
    proj = tmp_path / "projects" / "-p"
    proj.mkdir(parents=True)
    (proj / "ok.jsonl").write_bytes(jsonl(assistant("m1")))
    broken = proj / "gone.jsonl"
    broken.symlink_to(tmp_path / "missing-target.jsonl")
    result = scanner(tmp_path, tmp_path / "st").scan()
    assert [p for p, _ in result.unreadable] == [str(broken)]
    assert result.new_requests == 1


def test_missing_root_is_a_log_line_not_a_crash(tmp_path: Path) -> None:
    """An absent root is said once, at DEBUG (not every pass), and the passes complete."""
    seen: list[tuple[str, str]] = []

    class Log:
        def warning(self, event: str, **kw: str) -> None:
            seen.append(("warning", event))

        def debug(self, event: str, **kw: str) -> None:
            seen.append(("debug", event))

    scan = Scanner(Ledger(tmp_path / "l.db"), [tmp_path / "nope"], log=Log())
    assert scan.scan().files == 0 and scan.scan().files == 0
    assert seen == [("debug", "transcript_root_missing")]


def test_progress_reports_bytes(real_tree: Path, tmp_path: Path) -> None:
    """The progress callback ends at the total number of bytes."""
    calls: list[tuple[int, int]] = []
    scanner(real_tree, tmp_path).scan(progress=lambda d, t: calls.append((d, t)))
    assert calls and calls[-1][0] == calls[-1][1] > 8_000_000


def test_a_pool_lets_each_batch_go_once_handed_over(real_tree: Path) -> None:
    """The parent holds the batch in hand, not every batch the pass has parsed so far."""

    def alive() -> int:
        return sum(isinstance(o, _Batch) for o in gc.get_objects())

    files = sorted(find_transcripts(projects_dirs([real_tree]), lambda *_: None))
    assert len(files) >= 5
    pooled = Pooled(4e9, 1 << 24, 2, 0)
    pooled.submit([[(path, None)] for path in files])
    handed = 0
    for batch in pooled.batches():
        handed += 1
        del batch
    assert handed == len(files)
    # Every batch handed over and dropped, the pool still in hand: none is left alive
    # (parsed but not yet handed over, a batch waits in its future, as it must).
    assert alive() == 0
