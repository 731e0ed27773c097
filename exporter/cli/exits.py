"""The command line's exit codes, as the systemd units and ``--help`` name them."""

EXIT_CONFIG = 2  # bad usage or configuration: the units do not restart it
EXIT_LEDGER = 3  # an unusable ledger
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug, never a configuration error (restarted by systemd)
