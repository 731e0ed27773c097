"""claude-code-exporter: Claude Code transcripts as exact Prometheus metrics."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("claude-code-exporter")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
