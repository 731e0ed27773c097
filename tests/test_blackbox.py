"""The shipped blackbox_exporter module and scrape job, against a loopback HTTPS server.

The test module is the shipped ``anthropic_api`` module with one change, the
CA file of a throw-away self-signed certificate; the target is a tiny HTTPS
server on 127.0.0.1 that answers like the unauthenticated API (a 4xx).
"""

from __future__ import annotations

import copy
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import pytest
import yaml

from tests.support.net import LOOPBACK, free_port, http_get
from tests.support.paths import ROOT
from tests.support.prometheus import (
    ManagedProcess,
    PromServer,
    ServerPool,
    ThreadedServer,
    prometheus_config,
    require_binary,
)
from tests.support.tls import self_signed
from tests.support.wait import poll

PROM_DIR = ROOT / "deploy" / "prometheus"
BLACKBOX_FILE = PROM_DIR / "blackbox.yml"
CONFIG = PROM_DIR / "prometheus.yml"
MODULE = "anthropic_api"
TEST_MODULE = "anthropic_api_test"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)$")


def parse_exposition(text: str) -> Samples:
    """Map (name, labels) to value for every sample line of exposition text."""
    samples: Samples = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        pairs = frozenset(re.findall(r'(\w+)="([^"]*)"', labels or ""))
        samples[(name, pairs)] = float(value)
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """Return one sample's value; fail with the sample names when it is missing."""
    key = (name, frozenset(labels.items()))
    assert key in samples, f"{name}{labels} missing; have {sorted({n for n, _ in samples})}"
    return samples[key]


def shipped_blackbox() -> dict[str, Any]:
    """Parse the shipped blackbox.yml."""
    doc: dict[str, Any] = yaml.safe_load(BLACKBOX_FILE.read_text())
    return doc


def build_test_module(ca_file: Path) -> dict[str, Any]:
    """Build the test module: the shipped module with tls_config.ca_file set."""
    module: dict[str, Any] = copy.deepcopy(shipped_blackbox()["modules"][MODULE])
    module["http"]["tls_config"]["ca_file"] = str(ca_file)
    return module


class ApiLikeServer(ThreadedServer):
    """An HTTP(S) server on 127.0.0.1 answering 404 like the unauthenticated API (503 on /fail)."""

    def __init__(self, cert: Path | None = None, key: Path | None = None) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                status = 503 if self.path.startswith("/fail") else 404
                body = b'{"type":"error","error":{"type":"not_found_error"}}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

        self.errors: list[BaseException] = []
        errors = self.errors

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                """Record the failure (e.g. a refused TLS handshake) instead of printing it."""
                errors.append(sys.exc_info()[1] or RuntimeError("unknown error"))

        self.httpd = Server((LOOPBACK, 0), Handler)
        self.scheme = "http"
        if cert is not None and key is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            # Handshake in the handler thread, so a failed one cannot stall accept().
            self.httpd.socket = context.wrap_socket(
                self.httpd.socket, server_side=True, do_handshake_on_connect=False
            )
            self.scheme = "https"
        super().__init__(self.httpd)

    @property
    def url(self) -> str:
        """Return the base URL, e.g. ``https://127.0.0.1:40123/``."""
        return f"{self.scheme}://{LOOPBACK}:{self.httpd.server_address[1]}/"


class Blackbox:
    """prometheus-blackbox-exporter on 127.0.0.1 with a given config file."""

    def __init__(self, config: Path, workdir: Path) -> None:
        binary = require_binary("prometheus-blackbox-exporter")
        self.port = free_port()
        self.process = ManagedProcess(
            [
                binary,
                f"--config.file={config}",
                f"--web.listen-address={LOOPBACK}:{self.port}",
            ],
            workdir / "blackbox.log",
        )

    @property
    def address(self) -> str:
        """Return ``127.0.0.1:<port>``."""
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> Self:
        """Start the exporter and wait until it answers /metrics."""
        self.process.start()
        try:
            self.process.wait_http_ok(f"http://{self.address}/metrics", timeout=20)
        except BaseException:
            self.process.stop()
            raise
        return self

    def probe(self, module: str, target: str) -> Samples:
        """Run one probe and return its samples."""
        query = f"module={module}&target={target}"
        status, body = http_get(f"http://{self.address}/probe?{query}", timeout=15)
        assert status == 200, body[:500]
        return parse_exposition(body.decode())


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and key for 127.0.0.1 (made with openssl)."""
    require_binary("openssl")
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def https_server(tls_files: tuple[Path, Path]) -> Iterator[ApiLikeServer]:
    """The API-like HTTPS server on loopback."""
    cert, key = tls_files
    with ApiLikeServer(cert, key) as server:
        yield server


@pytest.fixture(scope="module")
def blackbox(
    tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[Path, Path]
) -> Iterator[Blackbox]:
    """A blackbox exporter with the shipped module and the test module (shipped + CA)."""
    workdir = tmp_path_factory.mktemp("blackbox")
    modules = shipped_blackbox()["modules"]
    modules[TEST_MODULE] = build_test_module(tls_files[0])
    config = workdir / "blackbox.yml"
    config.write_text(yaml.safe_dump({"modules": modules}))
    exporter = Blackbox(config, workdir).start()
    try:
        yield exporter
    finally:
        exporter.process.stop()


def test_test_module_differs_only_in_ca(tls_files: tuple[Path, Path]) -> None:
    """The test module equals the shipped one except for tls_config.ca_file."""
    shipped = shipped_blackbox()["modules"][MODULE]
    test = build_test_module(tls_files[0])
    assert "ca_file" not in shipped["http"]["tls_config"]
    test["http"]["tls_config"].pop("ca_file")
    assert test == shipped


def test_shipped_module_requires_https() -> None:
    """The shipped module is an HTTP probe that insists on verified TLS and accepts 4xx."""
    module = shipped_blackbox()["modules"][MODULE]
    http = module["http"]
    assert module["prober"] == "http"
    assert http["fail_if_not_ssl"] is True
    assert http["tls_config"].get("insecure_skip_verify", False) is False
    assert {401, 403, 404}.issubset(http["valid_status_codes"])
    assert not [code for code in http["valid_status_codes"] if code >= 500]
    assert http["ip_protocol_fallback"] is True


def test_blackbox_config_check(tmp_path: Path) -> None:
    """prometheus-blackbox-exporter --config.check accepts the shipped blackbox.yml."""
    binary = require_binary("prometheus-blackbox-exporter")
    proc = subprocess.run(
        [binary, "--config.check", f"--config.file={BLACKBOX_FILE}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Config file is ok" in proc.stdout + proc.stderr


def test_probe_succeeds_with_phases(blackbox: Blackbox, https_server: ApiLikeServer) -> None:
    """A probe of the HTTPS server succeeds with positive connect, TLS and first-byte times."""
    samples = blackbox.probe(TEST_MODULE, https_server.url)
    assert value(samples, "probe_success") == 1
    assert value(samples, "probe_http_ssl") == 1
    assert value(samples, "probe_http_status_code") == 404
    for phase in ("connect", "tls", "processing"):
        seconds = value(samples, "probe_http_duration_seconds", phase=phase)
        assert 0 < seconds < 5, (phase, seconds)
    assert value(samples, "probe_ssl_earliest_cert_expiry") > time.time()


def test_probe_fails_on_unknown_ca(blackbox: Blackbox, https_server: ApiLikeServer) -> None:
    """The shipped module (system CAs only) rejects the self-signed certificate."""
    before = len(https_server.errors)
    samples = blackbox.probe(MODULE, https_server.url)
    assert value(samples, "probe_success") == 0
    assert value(samples, "probe_http_status_code") == 0

    def server_saw_refused_handshake() -> bool:
        return any(isinstance(err, ssl.SSLError) for err in https_server.errors[before:])

    poll(server_saw_refused_handshake, 5, "refused TLS handshake", retry=(Exception,))


def test_probe_fails_on_plain_http(blackbox: Blackbox) -> None:
    """A plain-HTTP answer fails the probe (TLS is required)."""
    with ApiLikeServer() as plain:
        samples = blackbox.probe(TEST_MODULE, plain.url)
    assert value(samples, "probe_success") == 0
    assert value(samples, "probe_http_ssl") == 0


def test_probe_fails_on_server_error(blackbox: Blackbox, https_server: ApiLikeServer) -> None:
    """A 5xx answer fails the probe although TLS is fine."""
    samples = blackbox.probe(TEST_MODULE, https_server.url + "fail")
    assert value(samples, "probe_success") == 0
    assert value(samples, "probe_http_status_code") == 503


def test_shipped_scrape_job_shape() -> None:
    """The blackbox job probes the API through 127.0.0.1:9115 with a shipped module."""
    config = yaml.safe_load(CONFIG.read_text())
    job = next(sc for sc in config["scrape_configs"] if sc["job_name"] == "blackbox")
    assert job["metrics_path"] == "/probe"
    assert job["params"]["module"] == [MODULE]
    assert MODULE in shipped_blackbox()["modules"]
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["https://api.anthropic.com"]
    relabel = {
        (tuple(r.get("source_labels", ())), r["target_label"]): r for r in job["relabel_configs"]
    }
    assert (("__address__",), "__param_target") in relabel
    assert (("__param_target",), "instance") in relabel
    assert relabel[((), "__address__")]["replacement"] == "127.0.0.1:9115"


def test_promtool_accepts_config_with_blackbox_job() -> None:
    """Promtool check config accepts the shipped prometheus.yml, blackbox job included."""
    promtool = require_binary("promtool")
    proc = subprocess.run(
        [promtool, "check", "config", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@pytest.fixture
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., PromServer]]:
    """Start real Prometheus servers; all are stopped at teardown."""
    with ServerPool(tmp_path_factory) as pool:
        yield pool.start


def test_prometheus_scrapes_probe_through_shipped_relabelling(
    blackbox: Blackbox,
    https_server: ApiLikeServer,
    prometheus: Callable[..., PromServer],
) -> None:
    """Prometheus running the shipped blackbox job (loopback target) records probe_success 1."""
    config = yaml.safe_load(CONFIG.read_text())
    job = next(sc for sc in config["scrape_configs"] if sc["job_name"] == "blackbox")
    job["scrape_interval"] = "1s"
    job["scrape_timeout"] = "1s"
    job["params"]["module"] = [TEST_MODULE]
    job["static_configs"] = [{"targets": [https_server.url]}]
    for rule in job["relabel_configs"]:
        if rule["target_label"] == "__address__":
            rule["replacement"] = blackbox.address
    server = prometheus(
        prometheus_config([job], interval="1s"),
    )
    result = server.wait_for(f'probe_success{{job="blackbox",instance="{https_server.url}"}} == 1')
    assert len(result) == 1
    phases = server.wait_for(
        'probe_http_duration_seconds{job="blackbox"} > 0', lambda result: len(result) >= 3
    )
    assert {"connect", "tls", "processing"} <= {s["metric"]["phase"] for s in phases}
