"""Tests of claude-code-exporter."""
