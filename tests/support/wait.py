"""Waiting for a condition: one poll, bounded by a deadline, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

INTERVAL = 0.05  # seconds between two checks


class PollTimeoutError(AssertionError, TimeoutError):
    """A condition not reached by its deadline.

    A failed assertion to pytest, and a ``TimeoutError`` to callers that wait
    for servers and catch one (``PromServer.wait_for`` adds the server's log).
    """


def poll(
    check: Callable[[], T | None], deadline_s: float = 30.0, what: str = "", *,
    interval: float = INTERVAL, retry: tuple[type[BaseException], ...] = (OSError,),
) -> T:
    """Call ``check`` until it returns something truthy and return that; fail at the deadline.

    Exceptions of the kinds in ``retry`` count as "not yet" (by default connection
    errors while a server starts); any other propagates at once, so a check that
    finds its process dead fails the test without waiting out the deadline.
    """
    end = time.monotonic() + deadline_s
    last: object = None
    while True:
        try:
            got = check()
        except retry as exc:
            last = exc
        else:
            if got:
                return got
            last = got
        if time.monotonic() >= end:
            break
        time.sleep(interval)  # the polling interval, inside the deadline loop
    raise PollTimeoutError(f"timed out after {deadline_s:g} s waiting for {what or check}: "
                      f"last={last!r}") from (last if isinstance(last, BaseException) else None)
