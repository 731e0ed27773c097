"""The ledger stage: the request ledger (SQLite in the state dir), the one source of truth."""
