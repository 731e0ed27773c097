"""A head start: a cold pass's parsing begun early, taken over only when it fits the pass."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from exporter.cli import commands as cli
from exporter.cli.early import head_start
from exporter.ingest.discover import projects_dirs
from exporter.ingest.headstart import HeadStart, begin
from exporter.ingest.scan import default_workers
from exporter.ledger.schema import LEDGER_FILE
from tests.test_scan import REAL_TOTALS, scanner, totals

POOLED = {"workers": 2, "parallel_min_bytes": 0}


def _begun(tree: Path) -> HeadStart:
    """A head start over ``tree`` as a two-worker pass would run it, whatever its size."""
    head = begin(projects_dirs([tree]), workers=2, parallel_min_bytes=0)
    assert head is not None
    return head


def test_a_fitting_head_start_is_taken_over_and_counts_exactly(
        real_tree: Path, tmp_path: Path) -> None:
    """A cold pass takes the work over: every file read once, the totals to the token."""
    head = _begun(real_tree)
    scan = scanner(real_tree, tmp_path, head_start=head, **POOLED)
    result = scan.scan()
    assert head.taken
    assert totals(scan.ledger.requests()) == REAL_TOTALS
    assert result.checked == len(head.walk.files) and result.files_read == len(head.walk.files)
    again = scan.scan()  # the next pass reads nothing twice
    assert again.new_requests == 0 and again.bytes_read == 0
    scan.ledger.close()


@pytest.mark.parametrize("options", [{"workers": 3}, {"batch_bytes": 1 << 20},
                                     {"max_line_bytes": 1 << 20}, {"parser_nice": 0}])
def test_other_options_stop_the_head_start(
        real_tree: Path, tmp_path: Path, options: dict[str, int]) -> None:
    """A pass whose options differ from the head start's runs on its own, with the same totals."""
    head = _begun(real_tree)
    scan = scanner(real_tree, tmp_path, head_start=head, **{**POOLED, **options})
    scan.scan()
    assert not head.taken
    assert totals(scan.ledger.requests()) == REAL_TOTALS
    scan.ledger.close()


def test_a_ledger_that_knows_files_stops_the_head_start(real_tree: Path, tmp_path: Path) -> None:
    """A warm ledger reads what is new: the head start (every file from byte 0) is dropped."""
    first = scanner(real_tree, tmp_path, **POOLED)
    first.scan()
    first.ledger.close()
    head = _begun(real_tree)
    scan = scanner(real_tree, tmp_path, head_start=head, **POOLED)
    result = scan.scan()
    assert not head.taken
    assert result.new_requests == 0
    assert totals(scan.ledger.requests()) == REAL_TOTALS
    scan.ledger.close()


def test_other_directories_stop_the_head_start(real_tree: Path, tmp_path: Path) -> None:
    """A head start over another tree is not this pass's: the pass reads its own tree."""
    other = tmp_path / "other"
    shutil.copytree(real_tree, other)
    head = _begun(other)
    scan = scanner(real_tree, tmp_path / "state", head_start=head, **POOLED)
    scan.scan()
    assert not head.taken
    assert totals(scan.ledger.requests()) == REAL_TOTALS
    assert all(not p.startswith(str(other)) for p in scan.ledger.checkpoints())
    scan.ledger.close()


def test_a_file_written_after_the_walk_is_read_by_the_next_pass(
        real_tree: Path, tmp_path: Path) -> None:
    """The head start's walk is the pass's: a later file waits for the next pass, counted once."""
    tree = tmp_path / "tree"
    shutil.copytree(real_tree, tree)
    late = next(tree.rglob("*.jsonl"))
    held = tmp_path / "held.jsonl"
    late.rename(held)
    head = _begun(tree)
    held.rename(late)
    scan = scanner(tree, tmp_path / "state", head_start=head, **POOLED)
    scan.scan()
    assert head.taken and str(late) not in head.walk.files
    scan.scan()
    assert totals(scan.ledger.requests()) == REAL_TOTALS
    scan.ledger.close()


def test_a_stopped_head_start_ends_its_processes(real_tree: Path) -> None:
    """Stopping drops the units not begun; its batches are then none, and stopping twice is fine."""
    head = _begun(real_tree)
    head.stop()
    head.stop()
    assert list(head.batches()) == []
    assert not head.taken


def test_small_trees_and_one_worker_get_no_head_start(real_tree: Path) -> None:
    """Where a pass would parse in this process, nothing is started early."""
    assert begin(projects_dirs([real_tree]), workers=2) is None  # under PARALLEL_MIN_BYTES
    assert begin(projects_dirs([real_tree]), workers=1, parallel_min_bytes=0) is None


def _guess(argv: list[str], tmp_path: Path, environ: dict[str, str] | None = None) -> list[Path]:
    """The projects directories the command line's guess would start on ([] for none)."""
    seen: list[Path] = []

    def start(dirs: list[Path]) -> None:
        seen.extend(dirs)

    env = {"XDG_STATE_HOME": str(tmp_path / "xdg-state"), **(environ or {})}
    head_start(argv, env, tmp_path / "home", start=start)
    return seen


def test_the_guess_reads_data_dirs_and_the_state_dir(real_tree: Path, tmp_path: Path) -> None:
    """--data-dir (either spelling) names the tree; a cold --state-dir or default lets it start."""
    top = projects_dirs([real_tree])
    assert _guess(["report", "--data-dir", str(real_tree), "--json"], tmp_path) == top
    assert _guess(["report", "daily", f"--data-dir={real_tree}",
                   "--state-dir", str(tmp_path / "s")], tmp_path) == top


def test_the_guess_starts_nothing_it_cannot_model(real_tree: Path, tmp_path: Path) -> None:
    """Other commands, a warm ledger, a config file, scan options and --help start nothing."""
    tree = ["--data-dir", str(real_tree)]
    warm = tmp_path / "warm"
    warm.mkdir()
    (warm / LEDGER_FILE).write_bytes(b"")
    assert _guess(["serve", *tree], tmp_path) == []
    assert _guess(["report", *tree, "--state-dir", str(warm)], tmp_path) == []
    assert _guess(["report", *tree], tmp_path,
                  {"CLAUDE_CODE_EXPORTER_STATE_DIR": str(warm)}) == []
    for flag in (["--config", "x.toml"], ["--workers", "1"], ["--batch-mb=4"], ["--help"]):
        assert _guess(["report", *tree, *flag], tmp_path) == []
    assert _guess(["report", *tree], tmp_path, {"CLAUDE_CODE_EXPORTER_WORKERS": "1"}) == []
    assert _guess(["report"], tmp_path) == []  # no default root exists under this home


def _report(tree: Path, state: Path, head: HeadStart | None,
            capsys: pytest.CaptureFixture[str]) -> str:
    """The JSON report of ``tree`` into a ledger in ``state``, through the command's entry."""
    argv = ["report", "--json", "--data-dir", str(tree), "--state-dir", str(state)]
    assert cli.main(argv, {}, head_start=head) == 0
    return capsys.readouterr().out


def test_a_report_with_a_head_start_prints_what_one_without_does(
        real_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command takes a fitting head start over, and its report is the same, byte for byte."""
    if default_workers() < 2:
        pytest.skip("one CPU: a pass runs no parser processes, so nothing starts early")
    head = begin(projects_dirs([real_tree]), parallel_min_bytes=0)
    assert head is not None
    with_head = _report(real_tree, tmp_path / "a", head, capsys)
    assert head.taken
    assert with_head == _report(real_tree, tmp_path / "b", None, capsys)


def test_a_report_stops_a_head_start_it_cannot_use(
        real_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A head start over another tree is stopped by the command, which reports its own tree."""
    other = tmp_path / "other"
    shutil.copytree(real_tree, other)
    head = _begun(other)
    out = _report(real_tree, tmp_path / "a", head, capsys)
    assert not head.taken and list(head.batches()) == []
    assert out == _report(real_tree, tmp_path / "b", None, capsys)
