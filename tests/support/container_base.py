"""Podman with a storage of its own, and a local stand-in for the image's base.

Where the tests run there is no Docker engine and Docker Hub is out of reach
(the network reaches PyPI and Debian only), yet the image is to be built and
run as a user builds and runs it. So:

- ``Podman`` runs Debian's podman against a storage of its own under
  ``/var/tmp`` (never the user's image store: the stand-in carries the
  official base image's name and must not shadow a real one there). The
  storage is kept between runs as a cache. The engine settings are those a
  machine without systemd and without CAP_SYS_RESOURCE accepts: runc (crun
  refuses a hybrid cgroup v1/v2 layout), cgroupfs, events in a file, and
  ulimits it may set (podman's default RLIMIT_NOFILE of 1048576 would need
  CAP_SYS_RESOURCE; the current hard limit is used instead).
- ``ensure_stand_in`` makes the Dockerfile's FROM image locally: Debian's own
  Python of the tag's suite (``...-bookworm``), bootstrapped by mmdebstrap
  and imported under the FROM name. It carries a digest of its recipe in a
  label, so a later run reuses it until the recipe changes.

The stand-in against the official image: Python 3.11.2, Debian's build in
``/usr/bin``, instead of 3.11.11 built from source in ``/usr/local``; the
rest is what the Dockerfile relies on: ``python`` on ``PATH`` with pip and
venv, ``groupadd``/``useradd``, the CA bundle, ``LANG=C.UTF-8``, pip allowed
to install (Debian's ``EXTERNALLY-MANAGED`` marker removed, as the official
image has none).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Storage, settings and cache of the tests' podman (kept between runs).
STATE_HOME = Path("/var/tmp/claude-code-exporter-podman")
#: Run-time state (tmpfs on most machines, so a reboot clears it).
RUN_HOME = Path("/run/claude-code-exporter-podman")
#: RLIMIT_NPROC in containers: podman's default is refused here, and so is
#: this machine's hard limit (runc's setrlimit fails above 32768 on it);
#: a few thousand is plenty (the systemd units allow the exporter 256 tasks).
NPROC = 4096
#: Label of the stand-in base image: the digest of its recipe.
STAND_IN_LABEL = "org.claude-code-exporter.test.stand-in"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: A merged /usr made by mmdebstrap's hook rather than the usrmerge package,
#: which would pull in perl (26 MB, and a tenth of the bootstrap time).
MERGED_USR_HOOKS = Path("/usr/share/mmdebstrap/hooks/merged-usr")
#: On top of Debian's Essential set: the Dockerfile runs python, pip, venv,
#: groupadd and useradd (passwd); python-is-python3 puts ``python`` on PATH.
PACKAGES = ("passwd", "ca-certificates", "python3", "python3-venv", "python3-pip",
            "python-is-python3")
#: Nothing in the image reads them, and they are a quarter of the bootstrap.
NOT_INSTALLED = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*",
                 "/usr/share/locale/*")
#: The official image's configuration that the Dockerfile's stages inherit.
IMAGE_CONFIG = ("ENV LANG=C.UTF-8",
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                'CMD ["python3"]')


def shown(proc: subprocess.CompletedProcess[str]) -> str:
    """A finished command and its output, for assertion messages."""
    return f"$ {shlex.join(proc.args)}\nexit {proc.returncode}\n{proc.stdout}{proc.stderr}"


@dataclass(frozen=True)
class Podman:
    """The podman command on a storage of its own, with settings this machine kind accepts."""

    exe: str
    home: Path = STATE_HOME
    run_home: Path = RUN_HOME
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @property
    def env(self) -> dict[str, str]:
        """The environment podman runs in: the caller's, plus our two settings files."""
        return {**self.environ, "CONTAINERS_CONF": str(self.home / "containers.conf"),
                "CONTAINERS_STORAGE_CONF": str(self.home / "storage.conf")}

    def configure(self) -> None:
        """Write the settings files (every time: cheap, and a changed recipe takes effect)."""
        self.home.mkdir(parents=True, exist_ok=True)
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        if nproc == resource.RLIM_INFINITY or nproc > NPROC:
            nproc = NPROC
        limits = [f"nofile={nofile}:{nofile}", f"nproc={nproc}:{nproc}"]
        (self.home / "containers.conf").write_text(
            "[containers]\n"
            f"default_ulimits = {json.dumps(limits)}\n"
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'tmp_dir = "{self.run_home / "libpod"}"\n')
        (self.home / "storage.conf").write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{self.home / "storage"}"\n'
            f'runroot = "{self.run_home / "storage"}"\n')

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``podman ARGS`` to completion, capturing its output."""
        return subprocess.run([self.exe, *args], env=self.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def check(self, *args: str, timeout: float = 120) -> str:
        """Run ``podman ARGS``; return its standard output, fail unless it exits 0."""
        proc = self.run(*args, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(shown(proc))
        return proc.stdout

    def label(self, image: str, name: str) -> str | None:
        """A label of a local image; None when the image does not exist."""
        proc = self.run("image", "inspect", "--format", "{{json .Labels}}", image)
        if proc.returncode != 0:
            return None
        labels = json.loads(proc.stdout) or {}
        value = labels.get(name)
        return None if value is None else str(value)


@dataclass(frozen=True)
class StandIn:
    """The base image the build uses, and how it came to be there."""

    name: str
    digest: str
    made: bool  # False when an earlier run's image was reused
    seconds: float


def suite_of(image: str) -> str:
    """The Debian suite an official python image is built on: its tag's last word."""
    tag = image.rpartition(":")[2]
    suite = tag.rpartition("-")[2]
    if not suite.isalpha():
        raise ValueError(f"{image}: no Debian suite at the end of the tag")
    return suite


def mmdebstrap_argv(image: str) -> list[str]:
    """The mmdebstrap arguments of the stand-in, without the output path and mirror."""
    return ["--quiet", "--mode=root", "--variant=essential",
            f"--include={','.join(PACKAGES)}", f"--hook-dir={MERGED_USR_HOOKS}",
            *(f"--dpkgopt=path-exclude={path}" for path in NOT_INSTALLED),
            '--customize-hook=rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
            suite_of(image)]


def recipe_digest(image: str, mirror: str = DEBIAN_MIRROR) -> str:
    """A digest of everything that makes the stand-in: a change means a new one."""
    recipe = {"mmdebstrap": mmdebstrap_argv(image), "mirror": mirror,
              "config": list(IMAGE_CONFIG), "name": image}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def ensure_stand_in(podman: Podman, image: str, mmdebstrap: str, scratch: Path, *,
                    mirror: str = DEBIAN_MIRROR,
                    clock: Callable[[], float] = time.monotonic) -> StandIn:
    """Have ``image`` in podman's storage: the stand-in of this recipe, made if need be."""
    started = clock()
    digest = recipe_digest(image, mirror)
    if podman.label(image, STAND_IN_LABEL) == digest:
        return StandIn(image, digest, made=False, seconds=clock() - started)
    scratch.mkdir(parents=True, exist_ok=True)
    rootfs = scratch / "stand-in.tar"
    # stdin from /dev/null: without a terminal, mmdebstrap would read apt sources from it.
    proc = subprocess.run([mmdebstrap, *mmdebstrap_argv(image), str(rootfs), mirror],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        raise AssertionError(shown(proc))
    changes = [*IMAGE_CONFIG, f"LABEL {STAND_IN_LABEL}={digest}"]
    podman.check("import", *(arg for change in changes for arg in ("--change", change)),
                 str(rootfs), image, timeout=300)
    rootfs.unlink()
    return StandIn(image, digest, made=True, seconds=clock() - started)


def from_images(dockerfile: Path) -> list[str]:
    """The image of each FROM line of a Dockerfile, in order."""
    images = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if words and words[0].upper() == "FROM":
            images.append(words[1])
    return images


def qualified(image: str) -> str:
    """An image name as podman stores it (Docker Hub's official images under library/)."""
    first, sep, _ = image.partition("/")
    if not sep:
        return f"docker.io/library/{image}"
    if "." in first or ":" in first or first == "localhost":
        return image
    return f"docker.io/{image}"


def build_argv(options: Sequence[str], context: Path, *,
               ca_bundle: Path | None) -> list[str]:
    """``podman build OPTIONS`` as documented, plus what this machine needs.

    ``--pull=never``: the base is the local stand-in. ``--layers``: an earlier
    run's layers are reused when their inputs are the same. The host's CA
    bundle is mounted read-only into the RUN steps (the image keeps its own),
    so that pip reaches PyPI through whatever TLS proxy the host trusts.
    """
    argv = ["build", *options, "--pull=never", "--layers"]
    if ca_bundle is not None and ca_bundle.is_file():
        argv += ["-v", f"{ca_bundle}:/etc/ssl/certs/ca-certificates.crt:ro"]
    return [*argv, str(context)]
