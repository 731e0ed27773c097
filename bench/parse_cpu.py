"""CPU the transcript parser spends on a generated month, against another revision's parser.

Usage: python3 -m bench.parse_cpu [--tree DIR] [--rev main] [--rounds 5] [--check]

Every transcript file is read into memory once; then the working tree's
``parse_lines`` and the one of ``--rev`` (``git show REV:exporter/ingest/parse.py``,
loaded as a separate module) parse every file, alternating file by file, each
file into its own ``Parsed`` as the scan does. CPU time (``process_time``) per round and
the ratio of the medians are printed: the machine is shared, so only a ratio
of alternating runs means anything. ``--check`` first compares the two
parsers' results file by file (every request field, every count).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
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
    """The parse module as it is at git revision ``rev``, imported under another name."""
    text = subprocess.run(["git", "show", f"{rev}:exporter/ingest/parse.py"], check=True,
                          capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("_parse_baseline", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses/msgspec look the module up by name
    spec.loader.exec_module(module)
    return module


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
        same = list(a.requests.items()) == list(b.requests.items()) and a.counts == b.counts
        same = same and all(list(map(type, a.requests[k])) == list(map(type, r))
                            for k, r in b.requests.items())
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
