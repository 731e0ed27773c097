"""The system service's way to the samples: a user's spool dir shared through POSIX ACLs.

As docs/plan-limits.md sets it up: the user's state dir grants the service
account rwx (and both accounts rw by default ACL). The status line, run as
the user with ``--spool-dir``, makes files the service can read; the
service's ingest reads them into its own ledger and the today's-cost file it
writes there is readable by the user. Run as root (two real uids, in forked
children that drop to them), on a file system with ACLs; skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.cli.statusline import main as statusline_main
from exporter.ingest import spool
from exporter.ledger.plan_store import ingest_spool
from tests.support.statusline import payload

USER, SERVICE = 20_101, 20_102
_ACCESS, _DEFAULT = "system.posix_acl_access", "system.posix_acl_default"
_UO, _U, _GO, _M, _O = 0x01, 0x02, 0x04, 0x10, 0x20  # the tags of Linux's ACL xattr
_NONE = 0xFFFFFFFF


def acl(*named: tuple[int, int], owner: int, mask: int) -> bytes:
    """A POSIX ACL in the kernel's xattr form: owner, named users, group, mask, other."""
    entries = [(_UO, owner, _NONE), *((_U, perm, uid) for uid, perm in sorted(named)),
               (_GO, 0, _NONE), (_M, mask, _NONE), (_O, 0, _NONE)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def as_uid(uid: int, work: Callable[[], bool]) -> bool:
    """Run ``work`` in a forked child that became ``uid`` (no supplementary groups)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        ok = False
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.umask(0o022)
            ok = work()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


@pytest.fixture
def shared_dir() -> Iterator[tuple[Path, Path]]:
    """(the user's state dir with the docs' ACLs, the service's own state dir)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: two accounts")
    base = Path(tempfile.mkdtemp(prefix="spool-acl-"))
    try:
        base.chmod(0o711)
        user_dir, service_dir = base / "user-state", base / "service-state"
        for path, uid in ((user_dir, USER), (service_dir, SERVICE)):
            path.mkdir(mode=0o700)
            os.chown(path, uid, uid)
        try:
            os.setxattr(user_dir, _ACCESS, acl((SERVICE, 7), owner=7, mask=7))
            os.setxattr(user_dir, _DEFAULT, acl((USER, 6), (SERVICE, 6), owner=6, mask=6))
        except OSError as exc:
            pytest.skip(f"no POSIX ACLs here: {exc}")
        yield user_dir, service_dir
    finally:
        shutil.rmtree(base)


def refresh(user_dir: Path, *args: str) -> bool:
    """The status line's work as the user: one refresh into ``user_dir``."""
    import io
    import json

    out = io.BytesIO()
    statusline_main([*args, "--spool-dir", str(user_dir)],
                    io.BytesIO(json.dumps(payload()).encode()), out, {})
    return (user_dir / spool.SPOOL_NAME).exists() and "⚠" not in out.getvalue().decode()


def test_service_reads_the_users_spool_and_the_user_reads_todays_cost(
    shared_dir: tuple[Path, Path],
) -> None:
    """User writes, service ingests into its own ledger and publishes, user reads: no root."""
    user_dir, service_dir = shared_dir
    now = time.time()
    assert as_uid(USER, lambda: refresh(user_dir))

    def service() -> bool:
        done = ingest_spool(service_dir / "ledger.sqlite3", user_dir)
        spool.write_today(str(user_dir), spool.local_midnight(now), 4.5, now)
        return done.new == 1

    assert as_uid(SERVICE, service)
    assert as_uid(USER, lambda: spool.read_today(str(user_dir), now) == 4.5)
    assert as_uid(USER, lambda: refresh(user_dir))  # appends to the spool the service read


def test_an_owner_only_spool_is_what_the_service_cannot_read(
    shared_dir: tuple[Path, Path],
) -> None:
    """Without the group bits (no --spool-dir) the ACL's mask shuts the service out."""
    user_dir, _ = shared_dir

    def owner_only() -> bool:
        spool.append(str(user_dir), [spool.failure_record("empty", time.time())])
        return True

    assert as_uid(USER, owner_only)

    def read() -> bool:
        try:
            spool.read_regular(str(user_dir / spool.SPOOL_NAME), 100)
        except PermissionError:
            return True
        return False

    assert as_uid(SERVICE, read)
