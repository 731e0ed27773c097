"""Backtest of the plan-window pace estimators: mean ETA error per sequence kind and checkpoint.

Usage: python3 -m bench.pace [--seeds 20] [--weights 0.1,0.5]

Prints a Markdown table (docs/plan-limits.md, "Pace"): for each generated
sequence kind (tests/support/pace.py) and estimator
(exporter/projections/plan/pace.py), the mean absolute error in minutes of
the time 100 % is reached, asked at 25 %, 50 % and 75 % of the window.
``--weights`` adds blends with other weights of the recent ledger rate.
"""

from __future__ import annotations

import argparse
import functools

from exporter.projections.plan import pace
from tests.support.pace import CHECKPOINTS, table


def main(argv: list[str] | None = None) -> None:
    """Print the backtest table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--weights", default="", help="extra blend weights, comma-separated")
    args = parser.parse_args(argv)
    estimators = dict(pace.ESTIMATORS)
    for w in filter(None, args.weights.split(",")):
        estimators[f"blend {w}"] = functools.partial(pace.blend, weight=float(w))
    heads = " | ".join(f"at {round(100 * c)} %" for c in CHECKPOINTS)
    print(f"| sequence | estimator | {heads} |")
    print("|---|---|" + "---:|" * len(CHECKPOINTS))
    for kind, name, errors in table(args.seeds, estimators):
        print(f"| {kind} | {name} | " + " | ".join(f"{e:.1f}" for e in errors) + " |")


if __name__ == "__main__":
    main()
