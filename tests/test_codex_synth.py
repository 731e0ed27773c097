"""Generated Codex homes (exporter.synth.codex): each figure of `report --json` equals the truth."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exporter.cli.commands import main
from exporter.ingest.formats import CODEX, Root
from exporter.ingest.scan import Scanner
from exporter.synth import GenOptions, generate
from exporter.synth.codex import DEFAULT_TRAPS, TRAPS, CodexOptions, generate_home
from tests.support.codex import (
    TOKENS,
    expected,
    figures,
    ledger_sums,
    lines_of,
    pick,
    pieces,
    rollout_files,
    truth_sums,
)
from tests.support.ledgers import ledger_value
from tests.support.scan import counting_ledger


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_figure_equals_the_truth(seed: int, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Turns, tokens by kind, by model, by UTC day, lines and reasoning equal the truth."""
    truth = generate_home(tmp_path / "home", CodexOptions(seed=seed, sessions=8))
    got = figures(tmp_path / "home", tmp_path / "state", capsys)
    assert got == expected(truth)
    assert ledger_sums(tmp_path / "state" / "ledger.sqlite3") == truth_sums(truth)


def test_every_trap_is_in_the_default_mix(tmp_path: Path) -> None:
    """The default home holds each trap: the figures above are tested against all of them."""
    truth = generate_home(tmp_path / "home")
    kinds = {"snapshot", "archived", "archived_moved", "resume", "fork", "fork_empty",
             "no_context", "model_switch"}
    assert {k for k, n in truth["files"].items() if n} >= kinds
    assert len(truth["by_day"]) > 1 and "gpt-5 (assumed)" in truth["by_model"]
    assert truth["lines"]["duplicate"] > 0
    events = [d["payload"] for f in rollout_files(tmp_path / "home") for d in lines_of(f)
              if d["payload"].get("type") == "token_count"]
    assert any(e["info"] is None for e in events)
    assert any(e["rate_limits"] is None for e in events)
    zero = [e for e in events if e["info"] and e["info"]["last_token_usage"]["output_tokens"] == 0]
    assert zero and all(e["info"]["last_token_usage"]["total_tokens"] > 0 for e in zero)
    assert any(not f.read_bytes().endswith(b"\n") for f in rollout_files(tmp_path / "home"))
    windows = truth["plan_windows"]
    assert windows["latest"]["primary"]["window_minutes"] == 300
    assert windows["latest"]["secondary"]["window_minutes"] == 10080
    assert len(windows["primary"]) > 1 and windows["secondary"]
    assert all(0 < w["peak_used_percent"] <= 100 for w in windows["primary"])


def test_copies_only_add_lines_never_figures(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Snapshot, archived and fork copies counted once: more copies change no figure."""
    home = tmp_path / "home"
    truth = generate_home(home, CodexOptions(seed=5, sessions=12))
    assert all(truth["files"][k] for k in ("snapshot", "archived", "fork"))
    first = figures(home, tmp_path / "state", capsys)
    # Every file once more: archived (as Codex moves a finished thread), and a prefix
    # of each under a later day's folder (a snapshot of a growing thread).
    archive = home / "archived_sessions"
    for i, path in enumerate(rollout_files(home / "sessions")):
        shutil.copyfile(path, archive / f"copy-{i}-{path.name}")
        data = path.read_bytes()
        cut = data.rfind(b"\n", 0, len(data) // 2) + 1
        later = home / "sessions" / "2027" / "01" / "01" / f"snap-{i}-{path.name}"
        later.parent.mkdir(parents=True, exist_ok=True)
        later.write_bytes(data[:cut])
    again = figures(home, tmp_path / "state2", capsys)
    lines = again.pop("lines"), first.pop("lines")
    assert again == first
    assert lines[0]["usage"] == lines[1]["usage"] and lines[0]["duplicate"] > lines[1]["duplicate"]
    assert first == {k: v for k, v in expected(truth).items() if k != "lines"}


def test_a_fork_is_a_session_of_its_own(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A sub-agent fork's own turns stay under the fork's id: sessions equal the truth."""
    truth = generate_home(tmp_path / "home", CodexOptions(seed=1, sessions=8))
    assert figures(tmp_path / "home", tmp_path / "state", capsys)["sessions"] == truth["sessions"]


def test_a_fork_of_a_fork_counts_each_turn_once(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A sub-agent's sub-agent: its copy of its parent's turns adds no figure."""
    options = CodexOptions(seed=1, sessions=8, traps=DEFAULT_TRAPS | {"fork_nested"})
    truth = generate_home(tmp_path / "home", options)
    assert truth["files"]["fork_nested"]
    got = figures(tmp_path / "home", tmp_path / "state", capsys)
    assert got == expected(truth)


def test_the_same_seed_writes_the_same_bytes(tmp_path: Path) -> None:
    """One seed, one home, byte for byte, in processes of other hash seeds; another seed: not."""
    code = (
        "import hashlib, sys\n"
        "from pathlib import Path\n"
        "from exporter.synth.codex import CodexOptions, generate_home\n"
        "home = Path(sys.argv[1])\n"
        "generate_home(home, CodexOptions(seed=int(sys.argv[2]), sessions=4,"
        " target_bytes=3_000_000))\n"
        "h = hashlib.sha256()\n"
        "for f in sorted(home.rglob('rollout-*.jsonl')):\n"
        "    h.update(str(f.relative_to(home)).encode() + f.read_bytes())\n"
        "print(h.hexdigest())\n")

    def digest(name: str, seed: int, hash_seed: int) -> str:
        env = {**os.environ, "PYTHONPATH": os.getcwd(), "PYTHONHASHSEED": str(hash_seed)}
        run = subprocess.run([sys.executable, "-c", code, str(tmp_path / name), str(seed)],
                             env=env, capture_output=True, text=True, timeout=120, check=True)
        return run.stdout

    assert digest("a", 7, 1) == digest("b", 7, 2) != digest("c", 8, 1)


def test_a_trap_can_be_left_out(tmp_path: Path) -> None:
    """With no traps: one file per thread, no duplicate line, every model named."""
    truth = generate_home(tmp_path / "home", CodexOptions(sessions=3, traps=frozenset()))
    assert truth["files"] == {"threads": 3}
    assert "gpt-5 (assumed)" not in truth["by_model"]
    assert len(rollout_files(tmp_path / "home")) == 3
    with pytest.raises(ValueError, match="unknown Codex traps"):
        generate_home(tmp_path / "other", CodexOptions(traps=frozenset({"nope"})))
    assert set(TRAPS) >= {"snapshot", "archived", "resume", "fork", "no_context"}


def test_generate_writes_a_codex_home_beside_an_unchanged_claude_tree(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`generate --codex-sessions N`: root/codex and truth["codex"]; the Claude part unchanged."""
    assert main(["generate", str(tmp_path / "plain"), "--seed", "3", "--sessions", "2"]) == 0
    assert main(["generate", str(tmp_path / "both"), "--seed", "3", "--sessions", "2",
                 "--codex-sessions", "3"]) == 0
    capsys.readouterr()
    plain = sorted((p.relative_to(tmp_path / "plain"), p.read_bytes())
                   for p in (tmp_path / "plain" / "projects").rglob("*") if p.is_file())
    both = sorted((p.relative_to(tmp_path / "both"), p.read_bytes())
                  for p in (tmp_path / "both" / "projects").rglob("*") if p.is_file())
    assert plain == both
    truth = json.loads((tmp_path / "both" / "truth.json").read_text())
    codex = truth.pop("codex")
    assert truth == json.loads((tmp_path / "plain" / "truth.json").read_text())
    assert codex == generate_home(tmp_path / "again", CodexOptions(seed=3, sessions=3))
    assert generate(tmp_path / "api", GenOptions(seed=3, sessions=2, codex_sessions=3)) \
        == {**truth, "codex": codex}


def test_explicit_codex_home_beside_no_claude_root(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`--codex-home` with an empty HOME: the same figures as the home given as a data dir."""
    truth = generate_home(tmp_path / "home", CodexOptions(seed=4, sessions=6))
    environ = {"HOME": str(tmp_path / "empty"), "PATH": "/usr/bin:/bin"}
    got = figures(tmp_path / "home", tmp_path / "state", capsys,
                  "--codex-home", str(tmp_path / "home"), environ=environ)
    assert got == expected(truth)


def _grow(source: Path, live: Path, ledger_path: Path, seed: int) -> int:
    """Grow ``source``'s files in ``live`` piece by piece, a pass after each round; the passes.

    The pieces are cut anywhere, mid-line too.
    """
    ledger = counting_ledger(ledger_path)
    scanner = Scanner(ledger, [], others=[Root(live, CODEX)], workers=1)
    rng = random.Random(seed)
    growing = []
    for path in rollout_files(source):
        data = path.read_bytes()
        cuts = rng.sample(range(1, len(data)), min(12, len(data) - 1))
        target = live / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        growing.append((target.open("ab"), list(pieces(data, cuts))))
    passes = 0
    try:
        while any(parts for _, parts in growing):
            for fh, parts in growing:  # every live file a little longer, then one pass
                if parts:
                    fh.write(parts.pop(0))
                    fh.flush()
            scanner.scan()
            passes += 1
    finally:
        for fh, _ in growing:
            fh.close()
        ledger.close()
    return passes


def test_a_live_append_read_in_many_passes_equals_one_pass(tmp_path: Path) -> None:
    """Each file grown piece by piece (cut mid-line too), a pass after each: one pass's sums."""
    truth = generate_home(tmp_path / "source", CodexOptions(seed=6, sessions=6))
    assert _grow(tmp_path / "source", tmp_path / "live", tmp_path / "l.sqlite3", 6) > 10
    assert ledger_sums(tmp_path / "l.sqlite3") == truth_sums(truth)


def test_a_fork_grown_live_is_a_session_of_its_own(tmp_path: Path) -> None:
    """Read live, pass by pass, a fork's own turns still stay under the fork's id."""
    truth = generate_home(tmp_path / "source", CodexOptions(seed=1, sessions=8))
    _grow(tmp_path / "source", tmp_path / "live", tmp_path / "l.sqlite3", 1)
    assert ledger_value(tmp_path / "l.sqlite3",
                        "SELECT count(DISTINCT session) FROM requests") == truth["sessions"]


def test_a_generated_mixed_root_reports_both_agents_exactly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Claude Code tree and Codex home read together: each model's figures are its agent's truth."""
    root = tmp_path / "root"
    truth = generate(root, GenOptions(seed=2, sessions=3, codex_sessions=4))
    codex = truth.pop("codex")
    got = report_json(root, tmp_path / "state", capsys)
    assert pick(got["totals"]) == {k: truth["totals"][k] + codex["totals"][k] for k in TOKENS}
    want = {m: pick(t) for m, t in {**truth["by_model"], **codex["by_model"]}.items()}
    assert {m: pick(t) for m, t in got["by_model"].items()} == want


def report_json(root: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    """`report --json` over a generated root's Claude Code tree and its Codex home."""
    assert main(["report", "--json", "--state-dir", str(state), "--data-dir", str(root),
                 "--data-dir", str(root / "codex")]) == 0
    return json.loads(capsys.readouterr().out)
