"""Figures compared with the expected ones: integers exact, floats to 1e-9, USD to the cent."""

from __future__ import annotations

from typing import Any


def assert_matches(got: Any, want: Any, path: str = "") -> None:
    """Every figure of ``want`` is in ``got``: integers exact, floats to 1e-9, USD to the cent."""
    if isinstance(want, dict):
        for key, value in want.items():
            assert key in got, f"{path}/{key} missing"
            assert_matches(got[key], value, f"{path}/{key}")
    elif isinstance(want, float) or isinstance(got, float):
        tol = 0.005 if path.endswith("_usd") else 1e-9 * max(1.0, abs(want))
        assert abs(got - want) <= tol, f"{path}: {got} != {want}"
    else:
        assert got == want, f"{path}: {got} != {want}"
