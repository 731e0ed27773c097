"""A clock the test owns: it moves only when the test moves it."""

from __future__ import annotations


class Clock:
    """A callable clock (``time.time`` or ``time.monotonic`` in shape) that moves when told."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        """The time now."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds
