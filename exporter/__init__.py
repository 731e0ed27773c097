"""claude-code-exporter: Claude Code transcripts as exact Prometheus metrics."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use.

    Lazily, because importlib.metadata costs tens of milliseconds and every
    ``exporter.*`` import runs this file, including the status-line command,
    which Claude Code starts on every refresh.
    """
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        found = version("claude-code-exporter")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+source"
    globals()["__version__"] = found
    return found
