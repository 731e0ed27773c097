"""What the tests share, one helper of each kind.

- ``process``: child processes with a log file, their own process group and a
  reaper at exit; ``Serve`` runs ``claude-code-exporter serve`` on loopback.
- ``wait``: ``poll``, the one bounded wait for a condition (no bare sleeps).
- ``net``: loopback, ``free_port`` and ``http_get``.
- ``exposition``: parsing a scrape and ``total`` over its samples.
- ``clock`` and ``logs``: a clock the test moves and a logger that records, for
  parts run in-process (the follower, the daemon).
- ``deploy``: the deployment files (units, Dockerfile, compose) read as the
  tools that run them would.
- ``prometheus``: real Prometheus-ecosystem binaries on loopback (``PromServer``,
  ``ServerPool``, ``require_binary``, ``in_ci``) and small scrape targets.
- ``hardening``: what the hardening tests check and break with: the truth check
  of a scrape, ledger reads, dropped privileges, cgroups, a slowloris client.
"""
