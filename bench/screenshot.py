"""Screenshots of the landing page (docs/img/), and the headless-Chromium helpers the tests use.

Usage: python3 -m bench.screenshot [--out docs/img]

Generates a fixed-seed tree of sample sessions over the last three weeks,
serves it with `claude-code-exporter serve` on loopback (UTC, with budgets),
and saves the page at 1280x800 (desktop) and 390x844 (phone) as
``page-desktop.png`` and ``page-phone.png``. Needs Debian's ``chromium``
(``.ci/install`` installs it). Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from exporter.synth import GenOptions, generate
from tests.support.process import Serve

SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
BUDGETS = ("--budget-day-usd", "120", "--budget-month-usd", "1500")
# Quiet and self-contained: no first-run UI, no update or sync traffic, no GPU.
_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--no-first-run",
          "--disable-dev-shm-usage", "--hide-scrollbars")


def chromium() -> str:
    """The path of Debian's chromium, or an error saying how to get it."""
    found = shutil.which("chromium")
    if found is None:
        raise RuntimeError("chromium is required (.ci/install installs it)")
    return found


def run_chromium(url: str, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run on ``url`` with its own throw-away profile; stderr logged."""
    with tempfile.TemporaryDirectory(prefix="page-chromium-") as profile:
        return subprocess.run(
            [chromium(), *_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr",
             "--v=0", *extra, url],
            capture_output=True, text=True, timeout=timeout, check=False)


def dump_dom(url: str) -> tuple[str, list[str]]:
    """The DOM Chromium built for ``url``, and the console messages it logged."""
    done = run_chromium(url, "--dump-dom")
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout, console_messages(done.stderr)


def console_messages(stderr: str) -> list[str]:
    """Chromium's log lines for page console output and blocked or failed loads."""
    marks = ("CONSOLE", "Refused to", "Failed to load", "net::ERR_")
    return [line for line in stderr.splitlines() if any(m in line for m in marks)]


def screenshot(url: str, path: Path, size: tuple[int, int]) -> None:
    """Save ``url`` rendered at ``size`` (CSS pixels) as a PNG."""
    path.parent.mkdir(parents=True, exist_ok=True)
    done = run_chromium(url, f"--screenshot={path}", f"--window-size={size[0]},{size[1]}")
    if done.returncode != 0 or not path.is_file():
        raise RuntimeError(f"chromium screenshot failed: {done.stderr[-2000:]}")


def demo_tree(root: Path, now: datetime, days: int = 21) -> dict[str, int]:
    """Fixed-seed sessions on each of the ``days`` days before ``now``, in one tree.

    The generator runs its sessions side by side from one start, so each day is
    one run (its own seed and start) merged into ``root/projects``. A run whose
    sessions would go on past ``now`` starts earlier by the overshoot (its shape
    does not depend on the start): transcripts are never from the future, and
    the last day's requests stay on ``now``'s date whatever the time of day.
    Returns the summed request count and cost (micro-USD) of the runs' truths.
    """
    sums = {"requests": 0, "cost_micro_usd": 0}
    for day in range(days):
        start = (now - timedelta(days=days - 1 - day, hours=10 + day % 5)).replace(microsecond=0)
        part = root.parent / f"{root.name}-part{day}"
        options = GenOptions(seed=18 + day, sessions=1 + day % 4,
                             requests_per_session=40 + 7 * (day % 6), start=start,
                             malformed=False)
        truth = generate(part, options)
        overshoot = _latest(part) - now
        if overshoot > timedelta(0):
            shutil.rmtree(part)
            start -= overshoot + timedelta(seconds=1)
            truth = generate(part, dataclasses.replace(options, start=start))
        shutil.copytree(part / "projects", root / "projects", dirs_exist_ok=True)
        shutil.rmtree(part)
        sums["requests"] += truth["totals"]["requests"]
        sums["cost_micro_usd"] += round(truth["totals"]["cost_usd"] * 1e6)
    return sums


def _latest(tree: Path) -> datetime:
    """The latest line timestamp in a generated tree (its lines are all well-formed)."""
    lines = (msgspec.json.decode(line) for path in tree.rglob("*.jsonl")
             for line in path.read_bytes().splitlines())
    stamps = [d["timestamp"] for d in lines
              if isinstance(d, dict) and isinstance(d.get("timestamp"), str)]
    return datetime.fromisoformat(max(stamps))


def main(argv: list[str] | None = None) -> int:
    """Regenerate the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="page-shots-") as tmp:
        demo_tree(Path(tmp) / "tree", datetime.now(UTC))
        daemon = Serve(Path(tmp) / "tree", Path(tmp) / "state", *BUDGETS, env={"TZ": "UTC"})
        try:
            for name, size in SIZES.items():
                target = args.out / f"page-{name}.png"
                screenshot(daemon.url + "/", target, size)
                print(target)
        finally:
            daemon.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
