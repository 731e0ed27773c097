"""Compatibility families: Claude Code's own metric names, and the OpenTelemetry GenAI conventions.

Opt-in (setting ``compat``, flag ``--compat``), both projections of the same
ledger as the catalogue (docs/compat.md has the mapping):

- ``native``: ``claude_code.token.usage`` and ``claude_code.cost.usage`` with
  Claude Code's label names and values, so dashboards built on Claude Code's
  telemetry (Grafana dashboard 25255, the monitoring guide's stack) keep working;
- ``genai``: ``gen_ai.client.token.usage``, a histogram of tokens per request,
  as AI-observability backends read it.

The modules: :mod:`.genai` (the histogram's counting rule; imports only
``exporter.records``, so that the counting rules can use it), :mod:`.native`
(samples of the native counters from a class's sums) and :mod:`.families`
(the instruments and their feeding). This package imports none of them, so
importing :mod:`.genai` from the counting rules pulls in nothing else.
"""

from __future__ import annotations

from typing import Final

MODES: Final = ("native", "genai")
"""The accepted values of the ``compat`` setting."""
