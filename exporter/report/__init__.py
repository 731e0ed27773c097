"""Report renderers: the ledger's figures as tables, JSON and CSV for ``report``."""
