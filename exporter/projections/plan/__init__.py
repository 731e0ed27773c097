"""Plan limits: Claude Code's status-line figures (5-hour and weekly windows) as history.

``spool`` is what the status-line command writes (stdlib only: it runs on
every refresh); ``store`` moves the spool into the ledger; ``figures`` and
``estimate`` read it back; ``metrics`` names the metric families; ``cost``
prices ledger requests for the estimate and the status line's "today".
"""
