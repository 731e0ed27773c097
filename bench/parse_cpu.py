"""CPU the transcript parser spends on a generated month, against another revision's parser.

Usage: python3 -m bench.parse_cpu [--tree DIR] [--rev main] [--rounds 5] [--check]

Every transcript file is read into memory once; then the working tree's
``parse_lines`` and the one of ``--rev`` (the ``exporter`` package of REV,
extracted and imported as ``exporter_rev``: the parser spans several modules)
parse every file, alternating file by file, each
file into its own ``Parsed`` as the scan does. CPU time (``process_time``) per round and
the ratio of the medians are printed: the machine is shared, so only a ratio
of alternating runs means anything. ``--check`` first compares the two
parsers' results file by file (every request field, every count).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import io
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from exporter.ingest import parse
from exporter.ingest.discover import is_compaction_file
from exporter.records import Parsed

NOW = 2e9  # a fixed clock: far past the generated month, so no line is "in the future"


def _load(rev: str) -> ModuleType:
    """The parse module of git revision ``rev``, its package extracted as ``exporter_rev``."""
    archive = subprocess.run(["git", "archive", rev, "exporter"], check=True,
                             capture_output=True).stdout
    top = Path(tempfile.mkdtemp(prefix="parse-cpu-"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(top, filter="data")
    (top / "exporter").rename(top / "exporter_rev")
    for path in (top / "exporter_rev").rglob("*.py"):  # its own imports, renamed with it
        text = path.read_text(encoding="utf-8")
        path.write_text(re.sub(r"(?m)^(\s*)(from|import) exporter\b", r"\1\2 exporter_rev", text),
                        encoding="utf-8")
    sys.path.insert(0, str(top))
    return importlib.import_module("exporter_rev.ingest.parse")


def _files(tree: Path) -> list[tuple[bytes, bool]]:
    """Every transcript's bytes (whole lines only) and whether it is a compaction file."""
    out = []
    for path in sorted(tree.rglob("*.jsonl")):
        data = path.read_bytes()
        out.append((data[: data.rfind(b"\n") + 1], is_compaction_file(str(path))))
    return out


def _run(parse_lines: Callable[..., Parsed], files: list[tuple[bytes, bool]]) -> list[Parsed]:
    """Parse every file into its own result."""
    return [parse_lines(data, compaction_file=comp, now=NOW) for data, comp in files]


def _cpu(
    first: Callable[..., Parsed], second: Callable[..., Parsed], files: list[tuple[bytes, bool]],
) -> tuple[float, float]:
    """CPU seconds of one pass over every file by each parser, alternating file by file.

    Alternating per file (and which goes first) spreads the machine's noise
    evenly over both, so their ratio holds even when the absolute figures wander.
    """
    spent = [0.0, 0.0]
    clock = time.process_time
    for i, (data, comp) in enumerate(files):
        order = ((0, first), (1, second)) if i % 2 else ((1, second), (0, first))
        for slot, parse_lines in order:
            start = clock()
            parse_lines(data, compaction_file=comp, now=NOW)
            spent[slot] += clock() - start
    return spent[0], spent[1]


def _check(old: ModuleType, files: list[tuple[bytes, bool]]) -> None:
    """Exit non-zero unless both parsers give equal results for every file."""
    bad = requests = 0
    for a, b in zip(_run(old.parse_lines, files), _run(parse.parse_lines, files), strict=True):
        # Same keys in the same order, every field equal (and of the same type), same counts.
        # (The two trees' classes differ: types compare by name, counts field by field.)
        same = list(a.requests.items()) == list(b.requests.items())
        same = same and dataclasses.astuple(a.counts) == dataclasses.astuple(b.counts)
        same = same and all([type(v).__name__ for v in a.requests[k]]
                            == [type(v).__name__ for v in r] for k, r in b.requests.items())
        bad += not same
        requests += len(b.requests)
    print(f"identity: {len(files) - bad}/{len(files)} files equal ({requests} requests)")
    if bad:
        raise SystemExit(1)


def main() -> None:
    """Load, optionally check, then measure in alternation."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent / "out"
                    / "month-300mb-seed42")
    ap.add_argument("--rev", default="main")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    old = _load(args.rev)
    files = _files(args.tree)
    print(f"{len(files)} files, {sum(len(d) for d, _ in files) / 1e6:.0f} MB")
    if args.check:
        _check(old, files)
    base, new = [], []
    for i in range(args.rounds):
        b, n = _cpu(old.parse_lines, parse.parse_lines, files)
        base.append(b)
        new.append(n)
        print(f"round {i + 1}: {args.rev} {b:.3f} s, working tree {n:.3f} s, ratio {n / b:.3f}")
    b, n = statistics.median(base), statistics.median(new)
    ratio = statistics.median(x / y for x, y in zip(new, base, strict=True))
    print(f"median: {args.rev} {b:.3f} s, working tree {n:.3f} s; median ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
