"""Serve stage: the daemon, its HTTP endpoint and the OTLP push."""
