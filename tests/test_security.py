"""Security review as tests: binding, paths, label sanitising, TLS/auth, no secrets leaked.

One daemon (TLS, basic auth, DEBUG logs, full project paths as labels) runs
over a tree whose model ids and working directories are hostile and whose
prompts, tool output, ids and malformed lines carry a canary string. The
canary and the basic-auth password must never show up in a log or a scrape.
"""

from __future__ import annotations

import base64
import http.client
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.cli.config import DEFAULT_PORT, load_settings
from exporter.projections.labels import MAX_VALUE_LEN, LabelPolicy
from exporter.synth import GenOptions, generate
from tests.support.exposition import total
from tests.support.paths import ROOT
from tests.support.process import Serve
from tests.support.records import assistant, jsonl
from tests.support.tls import self_signed
from tests.support.wait import poll

CANARY = "CANARY-" + uuid.uuid4().hex  # prompt text, tool output, ids, bad lines
PASSWORD = "PWCANARY-" + uuid.uuid4().hex  # the configured basic-auth password
WRONG = "WRONGCANARY-" + uuid.uuid4().hex  # a password a client tries
ESCAPE = "PWNED-" + uuid.uuid4().hex  # a file name transcript content tries to create

HOSTILE_MODELS = [
    'claude-"quoted"-model', "back\\slash\\model", "new\nline", "tab\tand\rcr", "nul\x00byte",
    "bell\x07esc\x1b[31m", "seps\u2028\u2029\x85", "rtl\u202eoverride", "m" * 10_000,
    '{job="x"} 1\nfake_metric 9', "", "emoji-\U0001f600-ok",
]
HOSTILE_CWDS = [
    '/home/u/"proj"', "/home/u/new\nline", f"../../../../../../tmp/{ESCAPE}", "C:\\Windows\\x",
    "/x/" + "y" * 5_000, f"/tmp/{ESCAPE}/$(touch {ESCAPE})", "/\x00/\x1b",
]
FLOOD_MODELS = 100  # distinct model ids, more than the label cap


def _hostile_lines() -> bytes:
    """Usage lines with hostile model ids and working directories, and a flood of models."""
    recs: list[Any] = []
    early, late = "2026-09-01T00:00:00Z", "2026-11-01T00:00:00Z"  # hostile ids label first
    for i, model in enumerate(HOSTILE_MODELS):
        recs.append(assistant(f"msg_hm_{i}", f"req_hm_{i}", model=model, session=f"sh{i}",
                              ts=early))
    for i, cwd in enumerate(HOSTILE_CWDS):
        recs.append(assistant(f"msg_hc_{i}", f"req_hc_{i}", cwd=cwd, session=f"sc{i}", ts=early))
    for i in range(FLOOD_MODELS):
        recs.append(assistant(f"msg_flood_{i}", f"req_flood_{i}", model=f"flood-model-{i}",
                              ts=late))
    return jsonl(*recs)


def _canary_lines() -> bytes:
    """Lines whose prompt text, output, ids and malformed bytes carry the canary."""
    recs: list[Any] = []
    secret = assistant(f"msg_{CANARY}", f"req_{CANARY}", session=f"sess-{CANARY}",
                       gitBranch=CANARY, slug=CANARY)
    secret["message"]["content"] = [{"type": "text", "text": f"the answer is {CANARY}"},
                                    {"type": "thinking", "thinking": CANARY}]
    recs += [
        secret,
        {"type": "user", "sessionId": "s", "message": {"role": "user", "content": CANARY}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": CANARY}]}},
        {"type": "summary", "summary": CANARY},
    ]
    bad = [
        f'{{"type":"assistant","message":{{"id":"{CANARY}"'.encode(),  # truncated
        f'{{"type":"user","x":"{CANARY}\xff"}}'.encode("latin-1"),  # invalid UTF-8
        jsonl(assistant(usage={"input_tokens": CANARY}))[:-1],  # bad usage
        f"[{CANARY!r}]".encode(),  # not an object
    ]
    return jsonl(*recs) + b"".join(b + b"\n" for b in bad)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A hostile tree and a TLS + basic-auth daemon at DEBUG over it."""
    base = tmp_path_factory.mktemp("security")
    tree = base / "tree"
    truth = generate(tree, GenOptions(seed=91, sessions=2, requests_per_session=40))
    proj = tree / "projects" / "-hostile"
    proj.mkdir()
    (proj / "hostile.jsonl").write_bytes(_hostile_lines())
    os.mkfifo(proj / "fifo.jsonl")  # exercises the warning path of the log
    cert, key = self_signed(base)
    ctx = ssl.create_default_context(cafile=str(cert))
    serve = Serve(tree, base / "state", "--log-level", "debug", "--project-label", "full",
                  "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                  "--basic-auth-user", "prom", "--rescan-seconds", "0.5",
                  env={"CLAUDE_CODE_EXPORTER_BASIC_AUTH_PASSWORD": PASSWORD},
                  scheme="https", auth=("prom", PASSWORD), context=ctx)
    want = truth["totals"]["requests"] + len(HOSTILE_MODELS) + len(HOSTILE_CWDS) \
        + FLOOD_MODELS + 1
    poll(lambda: serve.requests() == want - 1, 30, "hostile tree counted")
    with (proj / "hostile.jsonl").open("ab") as fh:  # read by a follow pass, at DEBUG
        fh.write(_canary_lines())
    poll(lambda: serve.requests() == want, 30, "canary lines counted")
    yield {"base": base, "tree": tree, "serve": serve, "ctx": ctx, "cert": cert, "want": want}
    serve.stop()


def _exposition(serve: Serve) -> str:
    status, body = serve.get("/metrics")
    assert status == 200
    return body.decode()


def test_hostile_label_values_keep_the_exposition_valid(world: dict[str, Any]) -> None:
    """Quotes, backslashes, control chars, huge and injected ids: valid, bounded labels."""
    serve = world["serve"]
    text = _exposition(serve)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert total(fams, "claude_code_requests") == world["want"]
    assert "fake_metric" not in fams
    for line in text.splitlines():
        assert line.startswith(("# HELP claude_code_", "# TYPE claude_code_", "claude_code_")), \
            line[:200]
    models, projects = set(), set()
    for fam in fams.values():
        for s in fam.samples:
            for name, value in s.labels.items():
                assert len(value) <= MAX_VALUE_LEN, (name, value[:50])
                assert value.isprintable(), (name, value)
            models.add(s.labels.get("model"))
            projects.add(s.labels.get("project"))
    models.discard(None)
    assert len(models) <= 64 + 1 and "other" in models  # the cardinality cap held
    assert 'claude-"quoted"-model' in models and "back\\slash\\model" in models
    assert "new?line" in models and "unknown" in models
    assert "m" * (MAX_VALUE_LEN - 1) + "…" in models
    assert '/home/u/"proj"' in projects and "/home/u/new?line" in projects
    if shutil.which("promtool"):
        proc = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                              capture_output=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_canary_and_passwords_never_in_logs_or_scrapes(world: dict[str, Any]) -> None:
    """Prompt text, ids, bad lines and passwords appear in no log line, scrape or health."""
    serve = world["serve"]
    wrong = base64.b64encode(f"prom:{WRONG}".encode()).decode()
    assert serve.get("/metrics", {"Authorization": f"Basic {wrong}"})[0] == 401
    who = base64.b64encode(f"{CANARY}:{PASSWORD}".encode()).decode()
    assert serve.get("/metrics", {"Authorization": f"Basic {who}"})[0] == 401
    texts = {"metrics": _exposition(serve), "healthz": serve.get("/healthz")[1].decode(),
             "landing": serve.get("/")[1].decode()}
    poll(lambda: any(e.get("event") == "transcript_unreadable" for e in serve.events()), 10,
         "a warning was logged")
    texts["log"] = serve.log()
    assert any(e.get("level") == "debug" for e in serve.events()), "DEBUG was not on"
    for where, text in texts.items():
        for secret in (CANARY, PASSWORD, WRONG):
            assert secret not in text, f"{secret[:12]}… leaked into {where}"


def test_secrets_stay_out_of_configuration_errors(tmp_path: Path) -> None:
    """A bad setting next to a password (env or TOML) is reported without the password."""
    config = tmp_path / "c.toml"
    config.write_text(f'basic_auth_password = "{PASSWORD}"\nlisten = "nowhere"\n'
                      'namespace = "9-bad"\nbasic_auth_user = 5\n')
    for args, env in (
        (["--config", str(config)], {}),
        (["--listen", "nowhere:1", "--basic-auth-user", "prom"],
         {"CLAUDE_CODE_EXPORTER_BASIC_AUTH_PASSWORD": PASSWORD}),
    ):
        proc = subprocess.run([sys.executable, "-m", "exporter", "serve", *args],
                              cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=60, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "invalid configuration" in proc.stderr
        assert PASSWORD not in proc.stderr + proc.stdout


@pytest.mark.parametrize("path", [
    "/../../../../etc/passwd", "/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/metrics/../../../etc/passwd",
    "//etc/passwd", "/metrics%00.txt", "/healthz/..%2f..%2fetc%2fpasswd", "/metrics/",
    "http://127.0.0.1/etc/passwd", "/" + "a" * 8000,
])
def test_http_paths_never_reach_the_filesystem(world: dict[str, Any], path: str) -> None:
    """Traversal attempts get 404 or 400 and never a file's content."""
    serve = world["serve"]
    conn = http.client.HTTPSConnection("127.0.0.1", serve.port, timeout=10,
                                       context=world["ctx"])
    token = base64.b64encode(f"prom:{PASSWORD}".encode()).decode()
    conn.putrequest("GET", path, skip_host=False, skip_accept_encoding=True)
    conn.putheader("Authorization", f"Basic {token}")
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    assert resp.status in (400, 404, 414), (path, resp.status)
    assert b"root:" not in body and b"BEGIN" not in body


def test_transcript_content_never_becomes_a_path(world: dict[str, Any]) -> None:
    """Traversal strings in cwd and ids create no file; the state dir holds the ledger only."""
    base = world["base"]
    # Where those strings would land: /tmp, the daemon's working directory, the test tree.
    found = [n for d in ("/tmp", ROOT, Path.cwd(), "/") for n in os.listdir(d) if ESCAPE in n]
    found += [str(p) for p in base.rglob("*") if ESCAPE in p.name]
    assert not found, found
    allowed = {"ledger.sqlite3", "ledger.sqlite3-wal", "ledger.sqlite3-shm",
               "ledger.sqlite3.lock", "ledger.sqlite3.clean",  # the writer lock, a clean close
               "statusline-today.json"}  # today's cost, for the status line
    assert set(os.listdir(base / "state")) <= allowed


def test_auth_and_tls_are_enforced(world: dict[str, Any]) -> None:
    """No or malformed credentials get 401 (never 500); plain HTTP to the TLS port fails."""
    serve = world["serve"]
    for header in ["", "Basic", "Basic !!!", "Basic " + base64.b64encode(b"\xff\xfe:x").decode(),
                   "Bearer abc", "Basic " + base64.b64encode(b"prom").decode(),
                   "basic " + base64.b64encode(f"prom:{PASSWORD}x".encode()).decode()]:
        status, _ = serve.get("/metrics", {"Authorization": header})
        assert status == 401, header
    lower = "basic " + base64.b64encode(f"prom:{PASSWORD}".encode()).decode()
    assert serve.get("/metrics", {"Authorization": lower})[0] == 200  # scheme is case-free
    with socket.create_connection(("127.0.0.1", serve.port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert b"claude_code" not in sock.recv(4096)
    assert serve.get("/metrics")[0] == 200  # the server survived all of it


def test_silent_clients_do_not_block_tls_scrapes(world: dict[str, Any]) -> None:
    """Connections that never send a TLS hello do not stall other scrapes."""
    serve = world["serve"]
    silent = [socket.create_connection(("127.0.0.1", serve.port), timeout=10)
              for _ in range(16)]
    try:
        ctx = ssl.create_default_context(cafile=str(world["cert"]))
        conn = http.client.HTTPSConnection("127.0.0.1", serve.port, timeout=5, context=ctx)
        token = base64.b64encode(f"prom:{PASSWORD}".encode()).decode()
        conn.request("GET", "/healthz", headers={"Authorization": f"Basic {token}"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        for sock in silent:
            sock.close()


def test_default_bind_is_loopback_and_telemetry_port_refused() -> None:
    """Without settings the endpoint binds 127.0.0.1; port 9464 and host names are refused."""
    assert load_settings({}, {}).listen == f"127.0.0.1:{DEFAULT_PORT}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE_CODE_EXPORTER_")}
    for listen in ("127.0.0.1:9464", "example.com:9477", "0.0.0.0:99999"):
        proc = subprocess.run([sys.executable, "-m", "exporter", "serve", "--listen", listen],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                              check=False)
        assert proc.returncode == 2, (listen, proc.stderr)
        assert re.search(r"listen", proc.stderr), proc.stderr


def test_a_session_in_a_home_directory_does_not_label_the_user_name() -> None:
    """A home directory as cwd: the basename policy says ``~``, never the user name."""
    policy = LabelPolicy("basename", home="/home/alice")
    for cwd in ("/home/alice", "/home/alice/", "/home/bob", "/Users/carol", "/root"):
        assert policy.project(cwd) == "~", cwd
    assert policy.project("/home/alice/src/app") == "app"
    assert policy.project("/srv/home") == "home"
    assert LabelPolicy("basename", home="/data/u/alice").project("/data/u/alice") == "~"
    assert LabelPolicy("full", home="/home/alice").project("/home/alice") == "/home/alice"
