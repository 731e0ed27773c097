"""An OTLP/HTTP metrics receiver on loopback, and what it decoded read by name."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from tests.support.prometheus import ThreadedServer


class Receiver(ThreadedServer):
    """A tiny OTLP/HTTP metrics receiver on 127.0.0.1 that keeps every decoded request."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], ExportMetricsServiceRequest]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = ExportMetricsServiceRequest.FromString(body)
                with outer._lock:
                    outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, req))
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/metrics" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        super().__init__(httpd)

    @property
    def url(self) -> str:
        """The base URL (the exporter appends /v1/metrics)."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def last(self) -> tuple[dict[str, str], ExportMetricsServiceRequest] | None:
        """The newest request received, if any."""
        with self._lock:
            return self.requests[-1] if self.requests else None


def metrics_of(req: ExportMetricsServiceRequest) -> dict[str, Any]:
    """Metrics by name across scopes."""
    return {m.name: m for rm in req.resource_metrics for sm in rm.scope_metrics
            for m in sm.metrics}


def attrs(point: Any) -> dict[str, str]:
    """A data point's attributes."""
    return {a.key: a.value.string_value for a in point.attributes}
