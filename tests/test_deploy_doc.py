"""docs/deploy.md names only files that exist."""

from __future__ import annotations

import re

from tests.support.deploy import (
    DEPLOY_DOC,
)
from tests.support.paths import ROOT


def test_deploy_doc_names_only_existing_files() -> None:
    """Every repository path docs/deploy.md mentions exists."""
    text = DEPLOY_DOC.read_text()
    paths = set(re.findall(r"(?<![\w/.~-])((?:deploy|grafana|docs)/[\w./-]*\w|Dockerfile"
                           r"|\.dockerignore)(?![\w./:-])", text))
    assert {"Dockerfile", "deploy/compose.yaml", "deploy/exporter.env.example"} <= paths
    for rel in paths:
        assert (ROOT / rel).exists(), rel
