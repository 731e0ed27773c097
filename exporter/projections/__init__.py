"""Projections of the ledger: metrics, report figures, backfill timeline, pricing, labels."""
