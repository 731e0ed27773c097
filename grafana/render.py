"""Draw the dashboards from a live Prometheus, without Grafana: one PNG per dashboard.

    python3 -m grafana.render --url http://127.0.0.1:9090 --out docs/img
    python3 -m grafana.render --url URL --out DIR --timezone Europe/Berlin --var job=claude-code

Every panel's queries run as Grafana would run them (:mod:`grafana.query`:
variables, the panel's time range and interval, step alignment), then
:mod:`grafana.draw` draws the dashboard on its grid. One line per panel says
what is wrong with it, if anything: a failed query, no data, only zeros, a
fraction where a count belongs. Exit 1 if a query failed or, with
``--strict``, if a panel has a problem.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from grafana.draw import draw_board
from grafana.query import PanelData, Prometheus, Variables, problems, query_board

DASHBOARD_DIR = Path(__file__).resolve().parent / "dashboards"


def load_boards(directory: Path) -> dict[str, dict[str, Any]]:
    """Every dashboard JSON of ``directory`` by file stem."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(directory.glob("*.json"))}


@dataclass(frozen=True)
class Drawn:
    """One dashboard as queried (and drawn, when ``png`` is set)."""

    name: str
    variables: Variables
    panels: list[PanelData]
    png: Path | None


def render_boards(boards: Mapping[str, Mapping[str, Any]], prom: Prometheus, now: datetime, *,
                  out: Path | None = None,
                  overrides: Mapping[str, str] | None = None) -> list[Drawn]:
    """Query every dashboard and, when ``out`` is given, draw each to ``out/<name>.png``."""
    drawn = []
    for name, board in boards.items():
        variables, data = query_board(board, prom, now, overrides)
        png = None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            png = out / f"{name}.png"
            draw_board(board, variables, data, now, png)
        drawn.append(Drawn(name, variables, data, png))
    return drawn


def parse_now(text: str | None, zone: ZoneInfo) -> datetime:
    """``--time`` (ISO 8601 or unix seconds), or the current time, in ``zone``."""
    if text is None:
        return datetime.fromtimestamp(time.time(), zone)
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return datetime.fromtimestamp(float(text), zone)
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed.astimezone(zone) if parsed.tzinfo else parsed.replace(tzinfo=zone)


def summary(drawn: Iterable[Drawn]) -> tuple[list[str], int, int]:
    """One line per panel (its problems or "ok"), the failed queries, the panels with problems."""
    lines, failed, bad = [], 0, 0
    for board in drawn:
        lines.append(f"{board.name}: {board.png or '(not drawn)'}")
        for data in board.panels:
            if data.kind == "row":
                continue
            issues = problems(data)
            failed += sum(1 for r in data.results if r.error)
            bad += bool(issues)
            lines.append(f"  {data.title}: {'; '.join(issues) or 'ok'}")
    return lines, failed, bad


def main(argv: Sequence[str] | None = None) -> int:
    """Query and draw the dashboards; exit 1 on a failed query (any problem with --strict)."""
    parser = argparse.ArgumentParser(prog="python3 -m grafana.render", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:9090", help="Prometheus base URL")
    parser.add_argument("--out", type=Path, help="directory for the PNGs (omit: only query)")
    parser.add_argument("--dashboards", type=Path, default=DASHBOARD_DIR,
                        help="directory of dashboard JSON files")
    parser.add_argument("--timezone", default="UTC", help="IANA time zone of the dashboards")
    parser.add_argument("--time", help="the dashboards' 'now' (ISO 8601 or unix seconds)")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="give a variable this value instead of All or the first value")
    parser.add_argument("--strict", action="store_true", help="exit 1 if any panel has a problem")
    args = parser.parse_args(argv)
    zone = ZoneInfo(args.timezone)
    overrides = dict(v.split("=", 1) for v in args.var)
    drawn = render_boards(load_boards(args.dashboards), Prometheus(args.url),
                          parse_now(args.time, zone), out=args.out, overrides=overrides)
    lines, failed, bad = summary(drawn)
    print("\n".join(lines))
    return 1 if failed or (args.strict and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
