"""A pass runs without the cyclic garbage collector, and leaves it as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.ingest.workers import gc_paused as _gc_paused
from tests.support.scan import REAL_TOTALS, scanner, totals


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector enabled before the test and again after it, whatever it did."""
    gc.enable()
    yield
    gc.enable()


@pytest.mark.usefixtures("collector")
def test_a_pass_pauses_the_collector_and_enables_it_after(real_tree: Path,
                                                          tmp_path: Path) -> None:
    """Inside the pass (its progress calls) the collector is off; after it, on; totals exact."""
    seen: list[bool] = []
    scan = scanner(real_tree, tmp_path / "state", workers=2, parallel_min_bytes=0)
    scan.scan(progress=lambda _d, _t: seen.append(gc.isenabled()))
    assert seen and not any(seen)
    assert gc.isenabled()
    assert totals(scan.ledger.requests()) == REAL_TOTALS


@pytest.mark.usefixtures("collector")
def test_a_failed_pass_enables_the_collector_again() -> None:
    """An exception out of the pass leaves the collector on."""
    with pytest.raises(RuntimeError), _gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector")
def test_a_pass_leaves_a_disabled_collector_disabled() -> None:
    """A caller that turned the collector off finds it off after the pass."""
    gc.disable()
    with _gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


@pytest.mark.usefixtures("collector")
def test_parsing_makes_no_reference_cycles_even_of_rejected_lines() -> None:
    """What a pass frees without the collector is all it makes: good and rejected lines alike."""
    from exporter.ingest.parse import parse_lines
    from exporter.records import Parsed

    good = (b'{"type":"assistant","timestamp":"2026-01-01T00:00:00.000Z","sessionId":"s",'
            b'"cwd":"/p","requestId":"r%d","message":{"id":"m%d","model":"claude-opus-4-6",'
            b'"usage":{"input_tokens":1,"output_tokens":2}}}')
    usage = b'"usage":{"input_tokens":%s,"output_tokens":2}'
    bad = [b"{not json", b'\xff\xfe{"a":1}',
           b'{"type":"assistant","message":{' + usage % b"1" + b"}}",
           b'{"type":"assistant","timestamp":"nope","requestId":"r","message":{"id":"m",'
           + usage % b"1" + b"}}",
           b'{"type":"assistant","timestamp":"2026-01-01T00:00:00Z","requestId":"r",'
           b'"message":{"id":"m",' + usage % b"-1" + b"}}",
           b"[" * 5000, b'{"type":"assistant","message":"x"}', b"x" * 2000]
    data = b"".join(b"\n".join([good % (i, i), *bad]) + b"\n" for i in range(500))
    gc.collect()
    gc.disable()
    parsed = Parsed()
    parse_lines(data, compaction_file=False, into=parsed, max_line_bytes=1000)
    assert len(parsed.requests) == 500
    assert sum(parsed.counts.rejected.values()) == 500 * len(bad)
    assert len(set(parsed.counts.rejected)) >= 6  # every kind of rejection was exercised
    assert gc.collect() == 0
