"""Run a real VictoriaMetrics (Debian's ``victoria-metrics``) on loopback for tests.

``VMServer`` is ``/usr/bin/victoria-metrics`` (the single-node build) on
``127.0.0.1`` with a free port and a temporary storage directory. It receives
Prometheus remote write at ``remote_write_url`` and answers the same
``/api/v1/query``, ``/api/v1/query_range`` and ``/api/v1/series`` API as
Prometheus (its MetricsQL is a superset of PromQL), so it reuses
``PromServer``'s start, stop, ``query()`` and ``wait_for()``; only the command
line and the readiness path differ. ``own_metrics()`` reads VictoriaMetrics'
own ``/metrics`` (ingestion and storage figures), ``tsdb_status()`` its
cardinality report; ``import_prometheus()`` stores samples with timestamps (history
for the compression benchmark).

Flags chosen for tests: ``-search.latencyOffset=0s`` (by default a sample is
invisible to queries for 30 s after its timestamp) and
``-search.disableCache`` (no cached range results between polls).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.net import LOOPBACK, http_get
from tests.support.prometheus import PromServer, require_binary

#: The Debian package's version (``victoria-metrics -version`` prints nothing useful).
DEBIAN_VERSION = "1.79.5"


class VMServer(PromServer):
    """VictoriaMetrics single-node on 127.0.0.1 with a temporary storage directory."""

    ready_path = "/health"

    def __init__(self, workdir: Path, *, binary: str | None = None,
                 extra_args: Sequence[str] = (), retention: str = "100y") -> None:
        """Prepare (not start) a server in ``workdir``; ``retention`` is -retentionPeriod."""
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.storage: Path | None = None
        self.config_path = workdir / "no-config"  # VictoriaMetrics here scrapes nothing
        self.binary = binary or require_binary("victoria-metrics")
        self.extra_args = list(extra_args)
        self.retention = retention
        self.port = 0
        self.process = None

    def command(self, storage: Path) -> list[str]:
        """The command line: loopback port, storage, and the test-friendly query flags."""
        return [
            self.binary,
            f"-httpListenAddr={LOOPBACK}:{self.port}",
            f"-storageDataPath={storage}",
            f"-retentionPeriod={self.retention}",
            "-loggerLevel=WARN",
            "-search.latencyOffset=0s",
            "-search.disableCache",
        ]

    @property
    def remote_write_url(self) -> str:
        """Where Prometheus's ``remote_write`` sends samples."""
        return f"{self.url}/api/v1/write"

    def own_metrics(self) -> dict[str, float]:
        """VictoriaMetrics' own ``/metrics`` as ``name{labels}`` → value."""
        status, body = http_get(f"{self.url}/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics: HTTP {status}")
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out

    def tsdb_status(self, top: int = 20) -> dict[str, Any]:
        """The cardinality report of ``/api/v1/status/tsdb`` (series per metric, label...)."""
        data: dict[str, Any] = self.api("status/tsdb", {"topN": str(top)})
        return data

    def series(self, match: str) -> list[dict[str, str]]:
        """Label sets of the series matching a selector (what Grafana's label_values reads)."""
        found: list[dict[str, str]] = self.api("series", {"match[]": match})
        return found

    def force_flush(self) -> None:
        """Make every received sample searchable now (``/internal/force_flush``)."""
        status, body = http_get(f"{self.url}/internal/force_flush")
        if status != 200:
            raise RuntimeError(f"/internal/force_flush: HTTP {status}: {body[:200]!r}")

    def force_merge(self) -> None:
        """Start merging every partition's parts into big ones (``/internal/force_merge``)."""
        status, body = http_get(f"{self.url}/internal/force_merge")
        if status != 200:
            raise RuntimeError(f"/internal/force_merge: HTTP {status}: {body[:200]!r}")

    def import_prometheus(self, lines: Sequence[str]) -> None:
        """Store samples given as exposition lines with millisecond timestamps."""
        request = urllib.request.Request(f"{self.url}/api/v1/import/prometheus",
                                         data="\n".join(lines).encode() + b"\n", method="POST")
        with urllib.request.urlopen(request, timeout=120) as resp:
            if resp.status not in (200, 204):
                raise RuntimeError(f"/api/v1/import/prometheus: HTTP {resp.status}")
