"""The error every stage may raise for a setting that cannot work, and the command line reports.

A ``ConfigError`` is exit 2, which the systemd units do not restart: the
settings (exporter.cli.config) raise it for a bad value, ``serve`` for an
address it cannot listen on.
"""


class ConfigError(Exception):
    """Invalid configuration: the message names every bad setting."""
