"""The compose stack, without docker: ``docker-compose config`` and each mounted config.

Every bind-mounted path must exist, and each mounted config, laid out as its
container sees it, is checked by promtool, amtool, the blackbox exporter and
Grafana's provisioning rules.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli.config import ENV_PREFIX
from tests.support.deploy import (
    COMPOSE,
    DEPLOY,
    DOCKERFILE,
    SHIPPED_ALERTS,
    SHIPPED_PROMETHEUS,
    compose,
    dockerfile_env,
    run,
    shown,
    tool,
)
from tests.support.paths import ROOT
from tests.support.prometheus import in_ci


def bind_mounts(service: str) -> list[tuple[Path, str]]:
    """(host path, container path) of a service's relative bind mounts."""
    mounts = []
    for entry in compose()["services"][service].get("volumes", []):
        source, target = entry.split(":")[:2]
        if source.startswith("."):
            mounts.append(((DEPLOY / source).resolve(), target))
    return mounts


def materialize(service: str, dest: Path) -> None:
    """Copy a service's bind-mounted files to ``dest`` as the container sees them."""
    for source, target in bind_mounts(service):
        out = dest / target.lstrip("/")
        if source.is_dir():
            shutil.copytree(source, out)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, out)


def flag(service: str, name: str) -> str:
    """The value of a ``--name=value`` flag in a service's command."""
    for arg in compose()["services"][service].get("command", []):
        if arg.startswith(f"--{name}="):
            return str(arg.split("=", 1)[1])
    raise AssertionError(f"{service} has no --{name}")


def compose_env(tmp_path: Path) -> dict[str, str]:
    """An environment for docker-compose with a scratch HOME and transcripts dir."""
    (tmp_path / "claude").mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
            "CLAUDE_DIR": str(tmp_path / "claude")}


def test_compose_file_is_valid_for_docker_compose(tmp_path: Path) -> None:
    """docker-compose accepts the file (schema, interpolation) and rejects a misspelled key."""
    docker_compose = tool("docker-compose")
    env = compose_env(tmp_path)
    proc = run([docker_compose, "-f", str(COMPOSE), "config"], env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "WARN" not in proc.stderr, shown(proc)
    resolved = yaml.safe_load(proc.stdout)
    assert f"{tmp_path}/claude:/claude:ro" in resolved["services"]["exporter"]["volumes"]
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("    ports:\n", "    portz:\n", 1))
    proc = run([docker_compose, "-f", str(broken), "config"], env=env, cwd=tmp_path)
    assert proc.returncode != 0 and "portz" in proc.stdout + proc.stderr, shown(proc)


def test_compose_mounts_exist_and_ports_stay_on_loopback() -> None:
    """Every bind-mounted path exists, the build context has the Dockerfile, ports are 127.0.0.1."""
    services = compose()["services"]
    assert {"exporter", "prometheus", "alertmanager", "grafana"} <= set(services)
    build = services["exporter"]["build"]
    assert ((DEPLOY / build["context"]).resolve() / build["dockerfile"]) == DOCKERFILE
    for name in services:
        for source, _target in bind_mounts(name):
            assert source.exists(), f"{name}: {source} does not exist"
        for port in services[name].get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port}"
    exporter_mounts = services["exporter"]["volumes"]
    data = dockerfile_env()[f"{ENV_PREFIX}DATA_DIRS"]
    state = dockerfile_env()[f"{ENV_PREFIX}STATE_DIR"]
    assert any(m.endswith(f":{data}:ro") for m in exporter_mounts), exporter_mounts
    assert any(m.split(":")[1] == state for m in exporter_mounts), exporter_mounts


def service_ports() -> dict[int, str]:
    """Container port -> compose service, for the services Prometheus talks to."""
    ports = {int(dockerfile_env()[f"{ENV_PREFIX}LISTEN"].rpartition(":")[2]): "exporter"}
    for service in ("alertmanager", "blackbox"):
        ports[int(flag(service, "web.listen-address").rpartition(":")[2])] = service
    return ports


def test_compose_prometheus_config_is_the_shipped_one_with_service_addresses(
    tmp_path: Path,
) -> None:
    """Promtool accepts the mounted config; its jobs are the shipped ones with hosts renamed."""
    materialize("prometheus", tmp_path)
    config_in_container = flag("prometheus", "config.file")
    config = tmp_path / config_in_container.lstrip("/")
    proc = run([tool("promtool"), "check", "config", str(config)])
    shipped = yaml.safe_load(SHIPPED_PROMETHEUS.read_text())
    ours = yaml.safe_load(config.read_text())
    assert proc.returncode == 0, shown(proc)
    assert f"{len(shipped['rule_files'])} rule files found" in proc.stdout, shown(proc)
    # The same rule files: resolved in the container, mapped back to the host.
    mounts = bind_mounts("prometheus")
    container_dir = Path(config_in_container).parent
    ours_rules = set()
    for rule in ours["rule_files"]:
        path = container_dir / rule
        host = next(src / path.relative_to(dst) for src, dst in mounts
                    if path.is_relative_to(dst))
        ours_rules.add(host.resolve())
    assert ours_rules == {(SHIPPED_PROMETHEUS.parent / r).resolve()
                          for r in shipped["rule_files"]}
    # Jobs and Alertmanager: the shipped ones with 127.0.0.1:PORT -> service:PORT.
    renamed = json.dumps({k: shipped[k] for k in ("alerting", "scrape_configs")})
    for port, service in service_ports().items():
        renamed = renamed.replace(f"127.0.0.1:{port}", f"{service}:{port}")
    expected = json.loads(renamed)
    assert ours["alerting"] == expected["alerting"]
    ours_jobs = {job["job_name"]: job for job in ours["scrape_configs"]}
    for job in expected["scrape_configs"]:
        assert ours_jobs.get(job["job_name"]) == job, job["job_name"]
    assert ours["global"] == shipped["global"]


def alert_names() -> set[str]:
    """Names of the shipped alerts."""
    doc = yaml.safe_load(SHIPPED_ALERTS.read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_compose_alertmanager_config_checks_and_names_real_alerts(tmp_path: Path) -> None:
    """Amtool accepts the mounted config; every alert it names exists; receivers are defined."""
    materialize("alertmanager", tmp_path)
    config = tmp_path / flag("alertmanager", "config.file").lstrip("/")
    proc = run([tool("amtool"), "check-config", str(config)])
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, shown(proc)
    doc = yaml.safe_load(config.read_text())
    named = set(re.findall(r'alertname="(\w+)"', config.read_text()))
    assert named and named <= alert_names(), named - alert_names()
    receivers = {r["name"] for r in doc["receivers"]}

    def routes(route: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield route
        for child in route.get("routes", []):
            yield from routes(child)

    assert {r["receiver"] for r in routes(doc["route"]) if "receiver" in r} <= receivers


def test_compose_blackbox_config_checks(tmp_path: Path) -> None:
    """The blackbox exporter accepts the module file mounted into its container."""
    materialize("blackbox", tmp_path)
    config = tmp_path / flag("blackbox", "config.file").lstrip("/")
    proc = run([tool("prometheus-blackbox-exporter"), "--config.check",
                f"--config.file={config}"])
    assert proc.returncode == 0, shown(proc)


GRAFANA = ROOT / "grafana"


def datasource_uids(node: Any) -> Iterator[str]:
    """Every data source uid a dashboard JSON refers to."""
    if isinstance(node, dict):
        ref = node.get("datasource")
        if isinstance(ref, dict) and "uid" in ref:
            yield str(ref["uid"])
        for value in node.values():
            yield from datasource_uids(value)
    elif isinstance(node, list):
        for value in node:
            yield from datasource_uids(value)


def test_compose_grafana_sees_the_dashboards_and_the_compose_prometheus(tmp_path: Path) -> None:
    """Grafana's provisioning, laid out as mounted, finds every dashboard and Prometheus."""
    provisioning = GRAFANA / "provisioning"
    if not provisioning.is_dir() and not in_ci():
        pytest.skip("grafana/provisioning is not there yet")
    materialize("grafana", tmp_path)
    inside = tmp_path / "etc/grafana/provisioning"
    # Every provisioning file of grafana/ is mounted, under the same name.
    for kind in ("dashboards", "datasources"):
        theirs = sorted(p.name for p in (provisioning / kind).glob("*.y*ml"))
        assert theirs == sorted(p.name for p in (inside / kind).glob("*.y*ml")), kind
    assert {p.name for p in provisioning.iterdir()} <= {"dashboards", "datasources"}
    # The dashboard providers point where the dashboards are mounted.
    dashboards = sorted(p.name for p in (GRAFANA / "dashboards").glob("*.json"))
    assert dashboards
    for file in (inside / "dashboards").glob("*.y*ml"):
        for provider in yaml.safe_load(file.read_text())["providers"]:
            folder = tmp_path / provider["options"]["path"].lstrip("/")
            assert sorted(p.name for p in folder.glob("*.json")) == dashboards, provider
    # The data source: grafana/'s own with Prometheus reached by service name.
    ours = {f.name: yaml.safe_load(f.read_text()) for f in (inside / "datasources").iterdir()}
    theirs_ds = {f.name: yaml.safe_load(f.read_text())
                 for f in (provisioning / "datasources").glob("*.y*ml")}
    prometheus_port = flag("prometheus", "web.listen-address").rpartition(":")[2]
    scrape = yaml.safe_load((DEPLOY / "compose/prometheus.yml").read_text())["global"]
    uids = set()
    for name, doc in ours.items():
        for mine, upstream in zip(doc["datasources"], theirs_ds[name]["datasources"], strict=True):
            assert mine["url"] == f"http://prometheus:{prometheus_port}", mine
            assert mine["jsonData"]["timeInterval"] == scrape["scrape_interval"]
            assert {**mine, "url": upstream["url"]} == upstream
            uids.add(mine["uid"])
    for board in (GRAFANA / "dashboards").glob("*.json"):
        for uid in datasource_uids(json.loads(board.read_text())):
            assert uid.startswith("${") or uid in uids | {"-- Grafana --"}, (board.name, uid)
