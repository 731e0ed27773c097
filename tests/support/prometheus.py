"""Run real Prometheus-ecosystem binaries on loopback for tests.

What is here:

- ``require_binary(name)``: the path of a system binary such as
  ``/usr/bin/prometheus``. When it is missing the test is skipped, unless the
  ``CI`` environment variable is set, in which case the test fails: CI installs
  the Debian packages, so a missing binary there is a broken setup.
- ``ManagedProcess``: a subprocess with a log file, a readiness poll against an
  HTTP URL with a deadline, and a clean stop (terminate, wait, kill).
- ``PromServer``: ``/usr/bin/prometheus`` on ``127.0.0.1`` with a free port and a
  temporary TSDB directory, with ``query()``, ``alerts()``, ``rules()``,
  ``targets()`` and ``wait_for()`` over the HTTP API.
- ``ExpositionServer``: a tiny scrape target on ``127.0.0.1`` serving text from
  a callable (fixed or changing exposition text).
- ``prometheus_config()``: a config text (JSON, which is YAML) for a scrape job
  and rule files, with short intervals for tests.
- ``ServerPool`` and the ``prometheus_factory`` fixture: start servers with
  ``pool.start(config)``; all are stopped at exit / teardown. Register the
  fixture by listing ``"tests.support.prometheus"`` in ``pytest_plugins`` of the root
  conftest, or wrap ``ServerPool`` in a local fixture of a test module::

      @pytest.fixture
      def prometheus(tmp_path_factory):
          with ServerPool(tmp_path_factory) as pool:
              yield pool.start

Only loopback addresses are used. Nothing here sleeps except inside polling
loops bounded by a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, Self

import pytest

from tests.support.net import LOOPBACK, free_port, http_get
from tests.support.process import stop
from tests.support.wait import PollTimeoutError, poll

__all__ = [
    "DEBIAN_PACKAGE", "ExpositionServer", "ManagedProcess", "ProcessExitedError", "PromServer",
    "ServerPool", "ThreadedServer", "in_ci", "prometheus_config", "prometheus_factory",
    "require_binary", "sample_value", "static_job",
]


#: Debian package that ships each binary (for skip / failure messages).
DEBIAN_PACKAGE = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-blackbox-exporter": "prometheus-blackbox-exporter",
    "openssl": "openssl",
    "victoria-metrics": "victoria-metrics",
    "vmalert": "victoria-metrics",
}


def in_ci() -> bool:
    """Tell whether the ``CI`` environment variable is set (to anything non-empty)."""
    return bool(os.environ.get("CI"))


def require_binary(name: str) -> str:
    """Return the path of a system binary; skip the test if it is missing, fail under CI."""
    path = shutil.which(name)
    if path is None and Path("/usr/bin", name).exists():
        path = str(Path("/usr/bin", name))
    if path is not None:
        return path
    package = DEBIAN_PACKAGE.get(name, name)
    reason = f"{name} not found (Debian package {package!r})"
    if in_ci():
        pytest.fail(f"{reason}; CI is set, so this is an error, not a skip", pytrace=False)
    pytest.skip(reason)


class ManagedProcess:
    """A long-running binary with its output in a log file and a bounded stop."""

    def __init__(self, argv: Sequence[str], log_path: Path, cwd: Path | None = None) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        """Start the process, its stdout and stderr going to the log file."""
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.cwd,
        )

    def running(self) -> bool:
        """Tell whether the process has been started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def log_text(self, tail: int = 4000) -> str:
        """Return the last ``tail`` characters of the process output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-tail:]

    def wait_http_ok(self, url: str, timeout: float) -> None:
        """Poll ``url`` until it answers 200; fail early if the process exits."""

        def ready() -> bool:
            if not self.running():
                code = self.proc.returncode if self.proc is not None else None
                raise ProcessExitedError(
                    f"{self.argv[0]} exited with {code} before {url} was ready:\n{self.log_text()}"
                )
            status, _ = http_get(url, timeout=1.0)
            return status == 200

        try:
            poll(ready, timeout, f"{url} ready")
        except PollTimeoutError as exc:
            raise TimeoutError(
                f"{url} not ready within {timeout:.1f}s; output:\n{self.log_text()}"
            ) from exc

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the process, wait for it, kill it if it does not exit; idempotent."""
        if self.proc is not None:
            stop(self.proc, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None


class ProcessExitedError(RuntimeError):
    """The managed process exited while we waited for it to become ready."""


class PromServer:
    """A real Prometheus server on 127.0.0.1 with a temporary storage directory.

    ``storage`` serves an existing TSDB directory instead (it is not emptied).

    ``config`` is either a path to an existing config file (relative paths in
    it resolve against that file's directory, as Prometheus does) or the config
    text itself, which is written to ``workdir/prometheus.yml``.
    """

    def __init__(
        self,
        config: Path | str,
        workdir: Path,
        *,
        binary: str | None = None,
        extra_args: Sequence[str] = (),
        storage: Path | None = None,
    ) -> None:
        self.workdir = workdir
        self.storage = storage  # an existing TSDB directory (e.g. backfilled blocks)
        workdir.mkdir(parents=True, exist_ok=True)
        if isinstance(config, Path):
            self.config_path = config
        else:
            self.config_path = workdir / "prometheus.yml"
            self.config_path.write_text(config)
        self.binary = binary or require_binary("prometheus")
        self.extra_args = list(extra_args)
        self.port = 0
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """Return the base URL, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, ready_timeout: float = 30.0, attempts: int = 3) -> Self:
        """Start Prometheus and wait until ``/-/ready`` answers 200.

        A port taken between choosing it and Prometheus binding it is retried
        with another port, up to ``attempts`` times.
        """
        for attempt in range(1, attempts + 1):
            self.port = free_port()
            storage = self.storage or self.workdir / f"data-{attempt}"
            argv = [*self.command(storage), *self.extra_args]
            log = self.workdir / f"{Path(self.binary).name}-{attempt}.log"
            self.process = ManagedProcess(argv, log)
            self.process.start()
            try:
                self.process.wait_http_ok(f"{self.url}{self.ready_path}", ready_timeout)
            except ProcessExitedError:
                self.process.stop()
                if "address already in use" in self.process.log_text() and attempt < attempts:
                    continue
                raise
            except BaseException:
                self.process.stop()
                raise
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    #: The path that answers 200 once the server is ready.
    ready_path = "/-/ready"

    def command(self, storage: Path) -> list[str]:
        """The server's command line for ``storage`` and the current port."""
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={storage}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            "--log.level=warn",
        ]

    def stop(self) -> None:
        """Stop the server (terminate, wait, kill); safe to call twice."""
        if self.process is not None:
            self.process.stop()

    def running(self) -> bool:
        """Tell whether the Prometheus process is alive."""
        return self.process is not None and self.process.running()

    def log_text(self) -> str:
        """Return the tail of the server's output, for failure messages."""
        return self.process.log_text() if self.process is not None else ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ API
    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data``; raise on an error answer."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = http_get(f"{self.url}/api/v1/{path}{query}")
        try:
            doc = json.loads(body)
        except json.JSONDecodeError as exc:
            raise RuntimeError(f"/api/v1/{path}: HTTP {status}, not JSON: {body[:200]!r}") from exc
        if status != 200 or doc.get("status") != "success":
            raise RuntimeError(f"/api/v1/{path}: HTTP {status}: {doc.get('error', doc)}")
        return doc["data"]

    def query(self, expr: str) -> list[Any]:
        """Evaluate an instant query now and return its ``result`` list."""
        data = self.api("query", {"query": expr})
        result: list[Any] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """Return the active (pending or firing) alerts."""
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def rules(self) -> list[dict[str, Any]]:
        """Return the loaded rule groups."""
        groups: list[dict[str, Any]] = self.api("rules")["groups"]
        return groups

    def targets(self) -> list[dict[str, Any]]:
        """Return the active scrape targets."""
        active: list[dict[str, Any]] = self.api("targets")["activeTargets"]
        return active

    def wait_for(
        self,
        expr: str,
        predicate: Callable[[list[Any]], bool] = bool,
        timeout: float = 30.0,
    ) -> list[Any]:
        """Poll ``query(expr)`` until ``predicate(result)`` holds; return that result."""
        last: list[list[Any]] = [[]]

        def check() -> bool:
            last[0] = self.query(expr)
            return predicate(last[0])

        try:
            poll(check, timeout, f"query {expr!r}", interval=0.1, retry=(Exception,))
        except TimeoutError as exc:
            raise TimeoutError(
                f"{exc}; last result {last[0]!r}; server output:\n{self.log_text()}"
            ) from exc
        return last[0]

    def wait_for_alert(
        self, name: str, states: Sequence[str] = ("pending", "firing"), timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Poll until alert ``name`` is active in one of ``states``; return its instances."""

        def check() -> list[dict[str, Any]]:
            return [
                a
                for a in self.alerts()
                if a["labels"].get("alertname") == name and a["state"] in states
            ]

        found: list[dict[str, Any]] = poll(check, timeout, f"alert {name} {states}",
                                           interval=0.1, retry=(Exception,))
        return found


def sample_value(sample: Mapping[str, Any]) -> float:
    """Return the float value of one instant-vector sample from the HTTP API."""
    return float(sample["value"][1])


def prometheus_config(
    scrape_configs: Sequence[Mapping[str, Any]],
    rule_files: Sequence[Path] = (),
    *,
    interval: str = "1s",
) -> str:
    """Build a Prometheus config (JSON text, valid YAML) with short intervals."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(p.resolve()) for p in rule_files],
        "scrape_configs": [dict(sc) for sc in scrape_configs],
    }
    return json.dumps(config, indent=2)


def static_job(name: str, targets: Sequence[str], **extra: Any) -> dict[str, Any]:
    """Return a scrape config for ``targets`` (``host:port``) under job ``name``."""
    return {"job_name": name, "static_configs": [{"targets": list(targets)}], **extra}


class ThreadedServer:
    """Runs an ``http.server`` on a daemon thread while used as a context manager."""

    def __init__(self, httpd: HTTPServer) -> None:
        self.httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)


class ExpositionServer(ThreadedServer):
    """A scrape target on 127.0.0.1 serving ``/metrics`` from a callable.

    ``body`` is called on every scrape and returns exposition text, so a test
    can serve fixed text or counters that grow between scrapes. ``scrapes``
    counts the requests served.
    """

    def __init__(self, body: Callable[[], str]) -> None:
        self.body = body
        self.scrapes = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with outer._lock:
                    outer.scrapes += 1
                    payload = outer.body().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

        httpd = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        httpd.daemon_threads = True
        super().__init__(httpd)

    @property
    def address(self) -> str:
        """Return ``127.0.0.1:<port>``, ready for a scrape config's targets."""
        return f"{LOOPBACK}:{self.httpd.server_address[1]}"


class ServerPool:
    """Start any number of ``PromServer`` in temporary directories; stop them all on exit."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.servers: list[PromServer] = []

    def start(
        self,
        config: Path | str,
        *,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 30.0,
    ) -> PromServer:
        """Start a server for ``config`` (a path or the config text) and wait until ready."""
        server = PromServer(
            config, self.tmp_path_factory.mktemp("prometheus"), extra_args=extra_args
        )
        self.servers.append(server)
        return server.start(ready_timeout=ready_timeout)

    def stop_all(self) -> None:
        """Stop every server started by this pool."""
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


@pytest.fixture
def prometheus_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., PromServer]]:
    """Yield ``start(config, **kwargs) -> PromServer``; every server is stopped at teardown."""
    with ServerPool(tmp_path_factory) as pool:
        yield pool.start
