"""exporter.ingest.jsonlite agrees with the json package, value for value and error for error."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.ingest import jsonlite
from tests.support.paths import ROOT

scalars = (st.none() | st.booleans() | st.integers()
           | st.floats(allow_nan=False, allow_infinity=False) | st.text())
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_dumps_is_json_dumps_compact(value: Any) -> None:
    """Same text as json.dumps(..., separators=(",", ":")) for every JSON value."""
    assert jsonlite.dumps(value) == json.dumps(value, separators=(",", ":"))


@settings(max_examples=400, deadline=None)
@given(values, st.sampled_from(["", " ", "\n\t ", "\r\n"]))
def test_loads_reads_what_json_writes(value: Any, pad: str) -> None:
    """Any document json.dumps writes (indented or not, padded) parses to the same value."""
    for text in (json.dumps(value), json.dumps(value, indent=2, ensure_ascii=False)):
        assert jsonlite.loads(pad + text + pad) == json.loads(text)


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('{}[]":,0123456789.eE+-tfnrulsaNIy \\x\n')),
               max_size=40))
def test_loads_accepts_and_rejects_what_json_does(text: str) -> None:
    """On near-JSON garbage both parse to the same value or both raise ValueError."""
    try:
        expected: Any = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            jsonlite.loads(text)
        return
    got = jsonlite.loads(text)
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected


def test_non_json_values_are_refused() -> None:
    """NaN, infinities, non-string keys and unknown types raise, as the spool must stay JSON."""
    for bad in (math.nan, [math.inf]):
        with pytest.raises(ValueError):
            jsonlite.dumps(bad)
    for bad_type in ({1: "x"}, object(), b"x"):
        with pytest.raises(TypeError):
            jsonlite.dumps(bad_type)


def test_errors_are_value_errors_in_a_fresh_interpreter() -> None:
    """Without the json package loaded (as in the status-line command), errors are ValueErrors."""
    code = ("import sys\nfrom exporter.ingest import jsonlite\nassert 'json' not in sys.modules\n"
            "for t in ('{oops', '[1,]', '{\"a\": 1', '', '1 2'):\n"
            "    try:\n        jsonlite.loads(t)\n    except ValueError:\n        print('ok')\n")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n" * 5
