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
- ``scan``: scanning trees into ledgers (a counting ledger, a scanner, ``ingest``),
  ``totals`` of requests and ``REAL_TOTALS`` of the real fixtures, a killed pass.
- ``projection``: a metrics projection on a fresh registry (``T0``, ``req``,
  ``projection``, ``loaded``, ``batch``).
- ``figures``: ``assert_matches``, figures compared with the expected ones.
- ``backfill``: backfill text of requests, parsed back, and serve's start-up samples.
- ``statusline``: the status-line command run as Claude Code runs it, and its payload.
- ``otlp``: an OTLP/HTTP receiver on loopback and its decoded metrics.
- ``dashboards``: the committed dashboards, their panels and query variables.
- ``daemon``: ``Driven``, a daemon in-process over one transcript, stepped by hand.
- ``trees``: transcript trees with odd shapes (links, loops, aliases).
- ``requests_table``: the ledger's requests table written out, for bare connections.
"""
