"""Samples reach a serve whose state dir is not the user's (system service, container).

``CLAUDE_CODE_EXPORTER_SPOOL_DIR`` (the status line's ``--spool-dir``) names the
directory both sides exchange through: the status line appends samples
there, ``serve`` reads them from there and publishes today's cost there.
"""

from __future__ import annotations

import json
from pathlib import Path

from exporter.ingest import spool
from tests.support.process import Serve
from tests.support.statusline import line_of, payload, run
from tests.support.wait import poll


def used(serve: Serve, window: str) -> float | None:
    """``claude_code_plan_window_used_ratio`` of one window, None while absent."""
    fam = serve.scrape().get("claude_code_plan_window_used_ratio")
    if fam is None:
        return None
    values = [s.value for s in fam.samples if s.labels.get("window") == window]
    return values[0] if values else None


def test_serve_reads_samples_from_the_shared_spool_dir(tmp_path: Path) -> None:
    """Status line and serve given one spool dir: the sample reaches /metrics, today's file back."""
    data, state, shared = tmp_path / "claude", tmp_path / "state", tmp_path / "user-state"
    (data / "projects").mkdir(parents=True)
    serve = Serve(data, state, env={spool.SPOOL_DIR_ENV: str(shared)})
    try:
        text = line_of(run(json.dumps(payload(five=35.0)).encode(), "--spool-dir", str(shared),
                           state=None))
        assert text.startswith("Opus 4.6 · ctx 42% · 5h 35%")
        assert (shared / spool.SPOOL_NAME).exists()
        poll(lambda: used(serve, "five_hour") == 0.35, 15, "five_hour in /metrics")
        poll((shared / spool.TODAY_NAME).exists, 15, "today's cost in the spool dir")
        assert not (state / spool.SPOOL_NAME).exists()
        assert not (state / spool.TODAY_NAME).exists()
    finally:
        serve.stop()


def test_an_explicit_spool_dir_makes_files_its_group_can_share(tmp_path: Path) -> None:
    """In a spool dir set on purpose the spool takes the group bits (an ACL's mask needs them)."""
    shared = tmp_path / "shared"
    env = {spool.SPOOL_DIR_ENV: str(shared)}
    line_of(run(json.dumps(payload()).encode(), state=None, env=env))
    umask = int(next(line.split()[1] for line in Path("/proc/self/status").read_text().split("\n")
                     if line.startswith("Umask:")), 8)
    assert (shared / spool.SPOOL_NAME).stat().st_mode & 0o777 == 0o660 & ~umask
    own = tmp_path / "own"
    line_of(run(json.dumps(payload()).encode(), state=own))
    assert (own / spool.SPOOL_NAME).stat().st_mode & 0o777 == 0o600
