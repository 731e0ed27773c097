"""A worker's batch crosses to the parent unchanged, by msgpack or by pickle's fallback."""

from __future__ import annotations

import pickle
from pathlib import Path

from exporter.ingest.discover import find_transcripts, projects_dirs
from exporter.ingest.scan import _Batch, read_files
from exporter.records import Parsed, Request, Source


def _same(a: _Batch, b: _Batch) -> None:
    """Every field equal, requests in the same order and of the same types."""
    assert list(a.parsed.requests.items()) == list(b.parsed.requests.items())
    assert all(type(x) is Request and type(x.source) is type(y.source) and type(x.ts) is float
               for x, y in zip(a.parsed.requests.values(), b.parsed.requests.values(),
                               strict=True))
    assert a.parsed.counts == b.parsed.counts
    assert (a.checkpoints, a.bytes_read, a.errors, a.seen, a.rereads) == (
        b.checkpoints, b.bytes_read, b.errors, b.seen, b.rereads)


def test_real_batch_round_trips_by_msgpack(real_tree: Path) -> None:
    """The real fixtures' batch unpickles equal to what the worker made, via the msgpack blob."""
    files = find_transcripts(projects_dirs([real_tree]), lambda *_: None)
    batch = read_files([(f, None) for f in files], now=2e9)
    assert len(batch.parsed.requests) == 529
    data = pickle.dumps(batch)
    assert b"_from_wire" in data
    _same(pickle.loads(data), batch)


def test_unencodable_value_falls_back_to_pickle() -> None:
    """A string msgpack cannot hold (a lone surrogate) still crosses, by plain pickle."""
    req = Request("k", 1.5, "m", "\ud800", "/p", Source.SUBAGENT, 1, 2, 3, 4, 5)
    batch = _Batch(Parsed({"k": req}), [], 10, [("p", "why")], [("p", "s", ("k",))])
    data = pickle.dumps(batch)
    assert b"_from_pickle" in data
    _same(pickle.loads(data), batch)
