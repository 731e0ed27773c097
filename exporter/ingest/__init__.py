"""Ingest stage: transcripts discovered, tailed, parsed and scanned into the ledger; the spool.

The ledger is reached only through ``destination.Destination``; the status line's sample
spool (``spool``, ``plausible``, ``jsonlite``) is read by the ledger's plan store.
"""
