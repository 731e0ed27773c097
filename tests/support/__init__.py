"""What the tests share, one helper of each kind.

- ``process``: child processes with a log file, their own process group and a
  reaper at exit; ``Serve`` runs ``claude-code-exporter serve`` on loopback.
- ``wait``: ``poll``, the one bounded wait for a condition (no bare sleeps).
- ``net``: loopback, ``free_port`` and ``http_get``.
- ``exposition``: parsing a scrape and ``total`` over its samples.
- ``deploy``: the deployment files (units, Dockerfile, compose) read as the
  tools that run them would.

``tests/daemon_proc.py``, ``tests/hardening.py`` and ``tests/promserver.py``
re-export the names other modules imported from them before this package.
"""
