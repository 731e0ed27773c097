"""Run `claude-code-exporter serve` as a real process on loopback, and scrape it.

The helpers live in ``tests.support`` now; this module keeps the names that
modules written before it import (``Daemon`` is ``tests.support.process.Serve``).
"""

from __future__ import annotations

from tests.support.exposition import Samples, counter_samples, total
from tests.support.net import free_port
from tests.support.process import Serve as Daemon
from tests.support.wait import poll

__all__ = ["Daemon", "Samples", "counter_samples", "free_port", "poll", "total"]
