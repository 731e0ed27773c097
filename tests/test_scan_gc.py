"""A pass runs without the cyclic garbage collector, and leaves it as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.ingest.scan import _gc_paused
from tests.test_scan import REAL_TOTALS, scanner, totals


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
