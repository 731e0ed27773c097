"""The JSON text of a figures document: ``report --json``, its views and the page's API."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def _finite(value: Any) -> Any:
    """Replace NaN and infinities (not JSON) by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def to_json(figures: Mapping[str, Any]) -> str:
    """Serialise the figures as JSON: sorted keys (stable diffs), never NaN."""
    return json.dumps(_finite(figures), indent=2, sort_keys=True, allow_nan=False)
