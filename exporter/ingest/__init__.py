"""Ingest stage: discover, tail, parse, scan and follow transcript files into the ledger."""
