"""A real `serve` over a history of many models and projects: the totals a scrape shows.

Usage: python3 -m bench.cardinality {issue,worst}
  issue  40 projects x 6 models x 3 sources, two requests each (1,440 requests)
  worst  20 models x 68 projects x 3 sources: past both label caps, every label set
Writes the transcripts, starts `serve` on loopback, waits until every request
is counted, scrapes /metrics and prints one JSON object: each token type's
sum against the truth, the series carrying `otel_metric_overflow`, the
largest family's series, the scrape's size and time, and serve's memory. Run
with PYTHONPATH pointing at another checkout to measure that code instead.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.exposition import families, total
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.wait import poll

MODELS = ("claude-opus-4-6", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5",
          "claude-opus-4-1", "claude-sonnet-4-0", "claude-opus-4-0", "claude-3-7-sonnet",
          "claude-3-5-sonnet", "claude-3-5-haiku", "claude-3-haiku", "claude-3-opus",
          "claude-sonnet-4-6", "claude-opus-4-7", "claude-sonnet-5", "claude-opus-5",
          "claude-haiku-5-5", "claude-fable-5", "claude-nova-9", "gateway-model")
SHAPES = {"issue": (6, 40, 2), "worst": (20, 68, 1)}  # models, projects, requests per set
USAGE = {"input_tokens": 5, "output_tokens": 100, "cache_read_input_tokens": 1_000,
         "cache_creation_input_tokens": 50,
         "cache_creation": {"ephemeral_5m_input_tokens": 50, "ephemeral_1h_input_tokens": 0}}
TYPES = {"input": 5, "output": 100, "cache_read": 1_000, "cache_write_5m": 50}


def write_tree(root: Path, models: int, projects: int, each: int) -> int:
    """One transcript per project and model: main, subagent and compaction requests."""
    n = 0
    for p in range(projects):
        folder = root / "projects" / f"-w-proj{p}"
        folder.mkdir(parents=True)
        for m, model in enumerate(MODELS[:models]):
            recs = []
            for agent in (None, "a1", "acompact-1"):
                for _ in range(each):
                    recs.append(assistant(
                        f"msg_{n}", f"req_{n}", model=model, session=f"s{p}-{m}",
                        cwd=f"/w/proj{p}", sidechain=agent is not None, agent=agent,
                        ts=f"2026-10-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
                        usage=USAGE))
                    n += 1
            (folder / f"s{p}-{m}.jsonl").write_bytes(jsonl(*recs))
    return n


def rss_mb(pid: int) -> float:
    """Resident memory of a process now (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(shape: str) -> dict[str, Any]:
    """Write the history, serve it, scrape it once counted; the figures."""
    models, projects, each = SHAPES[shape]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        want = write_tree(base / "data", models, projects, each)
        serve = Serve(base / "data", base / "state")
        try:
            poll(lambda: serve.requests() == want, 300, "every request counted")
            start = time.perf_counter()
            status, body = serve.get("/metrics")
            seconds = time.perf_counter() - start
            assert status == 200
            text = body.decode()
            fams = families(text)
            tokens = fams["claude_code_tokens"].samples
            return {
                "shape": shape, "requests": want,
                "tokens_by_type": {t: [total(fams, "claude_code_tokens", type=t), want * v]
                                   for t, v in TYPES.items()},
                "overflow_series": text.count('otel_metric_overflow="true"'),
                "series_with_overflow_label": text.count("otel_metric_overflow="),
                "tokens_series": len(tokens),
                "scrape_bytes": len(body), "scrape_seconds": round(seconds, 3),
                "serve_rss_mb": round(rss_mb(serve.proc.pid), 1),
            }
        finally:
            serve.stop()


def main() -> None:
    """Run one shape and print its figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    print(json.dumps(run(parser.parse_args().shape)))


if __name__ == "__main__":
    main()
