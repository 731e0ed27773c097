"""One time-zone rule for `report` and the status line: TZ as the C library reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from exporter.cli.argv import glue_negative_values
from exporter.projections.periods import UTC_ZONE, date_day, local_zone, resolve_zone
from exporter.synth import GenOptions, generate
from tests.support.paths import ROOT

#: Rule strings glibc reads, zone names, and what it cannot read (UTC for it).
RULES = ["CET-1CEST,M3.5.0,M10.5.0/3", "EST5EDT,M3.2.0,M11.1.0", "<+0330>-3:30", "XYZ3",
         "AEST-10AEDT,M10.1.0,M4.1.0/3", "IST-1GMT0,M10.5.0,M3.5.0/1", "UTC+2",
         "WART4WARST,J1/0,J365/25", "<-03>3<-02>,M3.5.0/-2,M10.5.0/-1", "Europe/Berlin",
         ":Europe/Berlin", "garbage", "Nowhere/City"]
#: Days around the 2025 and 2026 changes of those zones, and plain days.
DAYS = [date(2025, m, d) for m, d in ((1, 1), (3, 9), (3, 30), (4, 6), (10, 5), (10, 26),
                                      (11, 2), (12, 31))] + [date(2026, 3, 29), date(2026, 7, 1)]


def _libc(tz: str, script: str, values: list[object]) -> list[int]:
    """Run ``script`` (reading ``values`` as JSON from stdin) under ``TZ=tz``; its JSON out."""
    env = {"TZ": tz, "PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], input=json.dumps(values), env=env,
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return list(json.loads(out))


@pytest.mark.parametrize("tz", RULES)
def test_report_midnights_are_the_status_lines(tz: str) -> None:
    """For each TZ, report's local midnights equal the status line's (libc) to the second."""
    midnights = _libc(tz, "import json, sys, time\n"
                          "from exporter.ingest.spool import local_midnight\n"
                          "print(json.dumps([local_midnight(time.mktime((y, m, d, 12, 0, 0, 0, 0,"
                          " -1))) for y, m, d in json.load(sys.stdin)]))",
                      [[d.year, d.month, d.day] for d in DAYS])
    zone = local_zone({"TZ": tz}, Path("/nonexistent"))
    assert [zone.midnight(date_day(d)) for d in DAYS] == midnights


@pytest.mark.parametrize("tz", RULES)
def test_report_offsets_are_libcs(tz: str) -> None:
    """Every 7 h 13 s over two years, the zone's UTC offset is libc's ``tm_gmtoff``."""
    stamps = list(range(1_735_000_000, 1_735_000_000 + 2 * 365 * 86_400, 7 * 3600 + 13))
    libc = _libc(tz, "import json, sys, time\nprint(json.dumps([time.localtime(t).tm_gmtoff "
                     "for t in json.load(sys.stdin)]))", list(stamps))
    zone = local_zone({"TZ": tz}, Path("/nonexistent"))
    assert [zone.offset(t) for t in stamps] == libc


def test_a_tz_not_understood_is_utc_with_a_warning() -> None:
    """TZ=garbage is UTC and said so; a rule without dates is read, and said so too."""
    heard: list[str] = []
    assert local_zone({"TZ": "garbage"}, Path("/nonexistent"), heard.append) == UTC_ZONE
    assert len(heard) == 1 and "'garbage'" in heard[0] and "UTC" in heard[0]
    zone = local_zone({"TZ": "CET-1CEST"}, Path("/nonexistent"), heard.append)
    assert zone.name == "CET-1CEST" and len(heard) == 2 and "without its dates" in heard[1]
    local_zone({"TZ": "Europe/Berlin"}, Path("/nonexistent"), heard.append)
    local_zone({"TZ": "CET-1CEST,M3.5.0,M10.5.0/3"}, Path("/nonexistent"), heard.append)
    assert len(heard) == 2  # understood: no warning


def test_timezone_flag_offsets_stay_iso() -> None:
    """``--timezone UTC+2`` is two hours east (ISO 8601), unlike TZ=UTC+2 (POSIX, west)."""
    assert resolve_zone("UTC+2").offset(0) == 7200
    assert local_zone({"TZ": "UTC+2"}, Path("/nonexistent")).offset(0) == -7200
    assert resolve_zone("-12:00").offset(0) == -12 * 3600


def test_negative_offsets_are_values() -> None:
    """``--timezone -12:00`` is glued to its option; other words are left alone."""
    assert glue_negative_values(["report", "--timezone", "-12:00", "--json"]) == [
        "report", "--timezone=-12:00", "--json"]
    assert glue_negative_values(["--since", "7d", "-12:00"]) == ["--since", "7d", "-12:00"]
    assert glue_negative_values(["--timezone=-1:00", "-2:00"]) == ["--timezone=-1:00", "-2:00"]


def _report(tmp_path: Path, *args: str, tz: str) -> subprocess.CompletedProcess[str]:
    """A real `report --json` over a small generated tree under ``TZ=tz``."""
    tree = tmp_path / "tree"
    if not tree.exists():
        generate(tree, GenOptions(seed=3, sessions=1, requests_per_session=4))
    env = {**os.environ, "TZ": tz, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--json", "--data-dir", str(tree),
         "--state-dir", str(tmp_path / "state"), "--log-format", "json", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False)


def test_report_process_warns_on_garbage_tz_and_takes_a_spaced_negative_offset(
    tmp_path: Path,
) -> None:
    """`TZ=garbage report` warns (JSON log) and reports UTC; `--timezone -12:00` works."""
    run = _report(tmp_path, tz="garbage")
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    assert [e["event"] for e in events if e.get("level") == "warning"] == [
        "timezone_not_understood"]
    assert json.loads(run.stdout)["range"]["timezone"] == "UTC"
    spaced = _report(tmp_path, "--timezone", "-12:00", tz="UTC")
    assert spaced.returncode == 0, spaced.stderr
    assert json.loads(spaced.stdout)["range"]["timezone"] == "-12:00"
