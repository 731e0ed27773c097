# claude-code-exporter in a container: transcripts mounted read-only at
# /claude, the ledger on a volume at /state, /metrics on port 9477.
#
#   docker build -t claude-code-exporter .
#   docker run -d --name claude-code-exporter \
#       -v ~/.claude:/claude:ro -v claude-code-exporter-state:/state \
#       -p 127.0.0.1:9477:9477 claude-code-exporter
#
# Inside its own network namespace the exporter listens on 0.0.0.0 (and says
# so with LISTEN_BEYOND_LOOPBACK, so a healthy start logs no warning); publish
# the port on the host's loopback only (token counts and project names are
# private). See docs/deploy.md.

# ---------------------------------------------------------------- build stage
# Builds the wheel and installs it, with its dependencies, into a virtual
# environment that the runtime stage copies as a whole. The environment gets
# no pip, setuptools or wheel of its own (--without-pip; the base image's pip
# installs into it with --python): nothing at run time needs them, and they
# were a third of its size. It keeps the bytecode pip compiles: without it
# every start of the command would compile the imports again (1-2 s).
FROM python:3.11.11-slim-bookworm AS build
# Root is the norm in a build stage: no warning from pip about it.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/claude-code-exporter \
 && python -m pip --python /opt/claude-code-exporter/bin/python install /wheels/*.whl \
 && /opt/claude-code-exporter/bin/claude-code-exporter --version

# -------------------------------------------------------------- runtime stage
# The same base as the build stage: the venv's interpreter links to its Python.
FROM python:3.11.11-slim-bookworm
LABEL org.opencontainers.image.title="claude-code-exporter" \
      org.opencontainers.image.description="Claude Code transcripts as Prometheus metrics" \
      org.opencontainers.image.licenses="MIT"
# The exporter's account (not --system: useradd warns that 10001 lies above
# the system range). /state is writable by any uid, so that running as
# the transcripts' owner (`--user "$(id -u):$(id -g)"`) works with a fresh volume.
ARG UID=10001
RUN groupadd --gid "${UID}" exporter \
 && useradd --no-log-init --uid "${UID}" --gid exporter \
        --home-dir /state --no-create-home --shell /usr/sbin/nologin exporter \
 && mkdir -p /claude /state \
 && chown exporter:exporter /state \
 && chmod 1777 /state
COPY --from=build /opt/claude-code-exporter /opt/claude-code-exporter

# Settings: any CLAUDE_CODE_EXPORTER_<NAME> (README.md), e.g. with
# --env-file deploy/exporter.env.example, or a TOML file with --config.
# SQLITE_TMPDIR: the ledger's large sorts (a first pass's end) need temporary
# files, and under --read-only the state volume is the one writable place.
ENV PATH=/opt/claude-code-exporter/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CLAUDE_CODE_EXPORTER_DATA_DIRS=/claude \
    CLAUDE_CODE_EXPORTER_STATE_DIR=/state \
    CLAUDE_CODE_EXPORTER_LISTEN=0.0.0.0:9477 \
    CLAUDE_CODE_EXPORTER_LISTEN_BEYOND_LOOPBACK=true \
    CLAUDE_CODE_EXPORTER_LOG_FORMAT=json \
    SQLITE_TMPDIR=/state

VOLUME ["/state"]
USER ${UID}:${UID}
EXPOSE 9477
# SIGTERM: the exporter finishes its pass, closes the ledger and exits 0.
STOPSIGNAL SIGTERM
# No curl in the slim image: the image's own Python asks /healthz (200 when
# the last pass succeeded and the watcher runs, 503 otherwise). It follows
# the port of CLAUDE_CODE_EXPORTER_LISTEN, and TLS and basic auth when set.
# The start period covers the first scan of a large history.
HEALTHCHECK --interval=30s --timeout=5s --start-period=5m --retries=3 \
    CMD ["python", "-c", "import base64, os, ssl, urllib.request as u; e = os.environ.get; port = e('CLAUDE_CODE_EXPORTER_LISTEN', ':9477').rpartition(':')[2]; tls = bool(e('CLAUDE_CODE_EXPORTER_TLS_CERT_FILE')); req = u.Request(('https' if tls else 'http') + '://127.0.0.1:' + port + '/healthz'); user = e('CLAUDE_CODE_EXPORTER_BASIC_AUTH_USER'); user and req.add_header('Authorization', 'Basic ' + base64.b64encode((user + ':' + e('CLAUDE_CODE_EXPORTER_BASIC_AUTH_PASSWORD', '')).encode()).decode()); u.urlopen(req, timeout=4, context=ssl._create_unverified_context() if tls else None)"]
ENTRYPOINT ["claude-code-exporter"]
CMD ["serve"]
