"""OTLP push: real OTLP/HTTP protobuf payloads received on loopback and decoded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
from prometheus_client import CollectorRegistry

from exporter.cli.assemble import otlp_options
from exporter.cli.config import load_settings
from exporter.errors import ConfigError
from exporter.ingest.discover import projects_dirs
from exporter.ingest.scan import Scanner
from exporter.projections import instruments
from exporter.projections.metrics import MetricsOptions, Projection
from exporter.projections.pricing import RateTable
from exporter.serve import otlp
from exporter.serve.push import PushState
from exporter.synth import GenOptions, generate
from tests.support.logs import Log
from tests.support.otlp import Receiver, attrs, metrics_of
from tests.support.process import Serve
from tests.support.scan import counting_ledger
from tests.support.wait import poll

CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A running receiver, stopped at teardown."""
    with Receiver() as rec:
        yield rec


def resource_of(req: ExportMetricsServiceRequest) -> dict[str, str]:
    """The resource attributes of the (single) resource in a request."""
    assert len(req.resource_metrics) == 1
    return {a.key: a.value.string_value for a in req.resource_metrics[0].resource.attributes}


def sum_points(metric: Any, **match: str) -> float:
    """Sum of a Sum metric's points whose attributes include ``match``."""
    return float(sum((p.as_double or p.as_int) for p in metric.sum.data_points
                     if attrs(p).items() >= match.items()))


def tree_requests(tmp: Path, sessions: int = 3) -> tuple[dict[str, Any], Path, Path]:
    """A generated tree, its truth, and where its ledger goes."""
    truth = generate(tmp / "tree", GenOptions(seed=4, sessions=sessions))
    return truth, tmp / "tree", tmp / "state"


def test_push_carries_the_catalogue_with_truth_values(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One push: names, attributes, resource, cumulative temporality and the truth's totals."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "DELTA")
    truth, tree, state = tree_requests(tmp_path)
    ledger = counting_ledger(state / "ledger.sqlite3")
    Scanner(ledger, projects_dirs([tree]), workers=1).scan()
    ledger.settle(force=True)
    options = otlp_options(load_settings(
        {"otlp_endpoint": receiver.url, "otlp_interval_seconds": 3600,
         "otlp_headers": {"authorization": "Bearer t0ken"},
         "otlp_resource_attributes": {"team": "platform"}}, {}))
    assert options is not None
    pushes = PushState(options.endpoint, Log())
    reader = otlp.reader(options, pushes)
    registry = CollectorRegistry()
    proj = Projection(RateTable.load(), MetricsOptions(), registry, readers=[reader],
                      resource=otlp.resource(options, host="ws-1", user="alice"))
    try:
        proj.load(ledger)
        assert reader.force_flush(timeout_millis=20_000)
        assert pushes.health()["ok"] and pushes.pushes == 1
    finally:
        proj.shutdown()
        ledger.close()
    headers, req = receiver.requests[0]
    assert headers["authorization"] == "Bearer t0ken"
    assert headers.get("content-encoding") == "gzip"
    res = resource_of(req)
    hashed = otlp.pseudonym("alice")
    assert res["service.name"] == "claude-code-exporter"
    assert (res["host.name"], res["user.hash"], res["team"]) == ("ws-1", hashed, "platform")
    assert res["service.instance.id"] == f"ws-1:{hashed}"
    assert "user.name" not in res
    got = metrics_of(req)
    totals = truth["totals"]
    requests = got["claude_code_requests"]
    assert requests.sum.is_monotonic
    assert requests.sum.aggregation_temporality == CUMULATIVE
    assert sum_points(requests) == totals["requests"]
    assert {frozenset(attrs(p)) for p in requests.sum.data_points} == {
        frozenset({"model", "project", "source"})}
    for kind in ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h"):
        assert sum_points(got["claude_code_tokens"], type=kind) == totals[f"{kind}_tokens"]
    assert abs(sum_points(got["claude_code_cost_usd"]) - totals["cost_usd"]) < 1e-6
    context = got["claude_code_request_context_tokens"].histogram
    assert context.aggregation_temporality == CUMULATIVE
    assert sum(p.count for p in context.data_points) == totals["requests"]
    assert list(context.data_points[0].explicit_bounds) == [
        float(b) for b in instruments.BUCKETS["request_context_tokens"]]
    scraped = {f.name for f in registry.collect()}
    assert scraped <= set(got), "every scraped family is pushed under the same name"


def test_identity_policies() -> None:
    """host/user as names, hashes or nothing; the instance id stays unique either way."""
    h, u = otlp.pseudonym("ws-1"), otlp.pseudonym("alice")
    assert otlp.identity("name", "name", "ws-1", "alice") == {
        "host.name": "ws-1", "user.name": "alice", "service.instance.id": "ws-1:alice"}
    assert otlp.identity("hash", "none", "ws-1", "alice") == {
        "host.id": h, "service.instance.id": f"{h}:{u}"}
    assert otlp.identity("none", "hash", "ws-1", "bob")["service.instance.id"] != (
        otlp.identity("none", "hash", "ws-1", "alice")["service.instance.id"])


def test_settings_refuse_a_silent_exporter() -> None:
    """Turning /metrics off needs an OTLP endpoint; endpoints must be http(s) URLs."""
    with pytest.raises(ConfigError, match="prometheus_enabled"):
        load_settings({"prometheus_enabled": False}, {})
    with pytest.raises(ConfigError, match="otlp_endpoint"):
        load_settings({"otlp_endpoint": "collector:4318"}, {})
    assert load_settings({"otlp_endpoint": "https://c.example"}, {}).otlp_endpoint == (
        "https://c.example/v1/metrics")


def serve(tmp_path: Path, receiver: Receiver, interval: str) -> tuple[Any, Serve]:
    """Start `serve` with /metrics off, pushing to ``receiver``; return (truth, process)."""
    truth, tree, state = tree_requests(tmp_path, sessions=2)
    proc = Serve(tree, state, "--no-prometheus-enabled", "--otlp-endpoint", receiver.url,
                 "--otlp-interval-seconds", interval, "--otlp-user", "none",
                 settle="0.1", wait=False)
    return truth, proc


def events(proc: Serve, name: str) -> list[dict[str, Any]]:
    """The JSON log lines of the serve process with event ``name``."""
    return [e for e in proc.events() if e.get("event") == name]


def has_requests(receiver: Receiver, want: int) -> bool:
    """True once the newest push counts ``want`` requests."""
    last = receiver.last()
    metric = metrics_of(last[1]).get("claude_code_requests") if last else None
    return metric is not None and sum_points(metric) == want


@pytest.mark.parametrize("interval", ["0.3", "3600"])
def test_serve_pushes_without_a_prometheus_endpoint(
    tmp_path: Path, receiver: Receiver, interval: str
) -> None:
    """`serve --no-prometheus-enabled` serves no /metrics, pushes periodically and on SIGTERM."""
    truth, proc = serve(tmp_path, receiver, interval)
    want = truth["totals"]["requests"]
    try:
        serving = poll(lambda: events(proc, "serving"), 60, "serving", retry=(Exception,))
        assert serving[0]["otlp"].endswith("/v1/metrics")
        assert proc.get("/metrics")[0] == 404  # nothing to scrape...
        assert proc.get("/healthz")[0] == 200  # ...but health checks still work
        if interval == "0.3":
            poll(lambda: has_requests(receiver, want), 60, "a push", retry=(Exception,))
        else:
            assert not receiver.requests  # the first periodic push is an hour away
        assert proc.stop() == 0  # SIGTERM
        assert has_requests(receiver, want)  # the push on shutdown
        res = resource_of(receiver.requests[-1][1])
        assert "user.hash" not in res and "user.name" not in res
    finally:
        proc.kill9()
