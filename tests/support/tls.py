"""A throw-away self-signed certificate for loopback TLS tests (made with openssl)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def self_signed(directory: Path) -> tuple[Path, Path]:
    """Write cert.pem and key.pem for 127.0.0.1/localhost into ``directory``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("openssl is required (.ci/install installs it)")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key
