"""Exact money: costs are integer pico-dollars (1e-12 USD), rounded once, to 1e-6 USD, when shown.

A rate in USD per million tokens is ``rate × 1e6`` pico-dollars per token, an
integer for every list price (at most six decimals). Integer sums do not depend
on the grouping, so a view's rows add up to the summary's total to the last digit.
"""

from __future__ import annotations

from typing import Final

PICO_PER_USD: Final = 10**12
PICO_PER_MICRO: Final = 10**6


def usd(pico: int) -> float:
    """Pico-dollars as USD rounded to 1e-6 (half up): ``26.291159``, never float noise."""
    micro = (pico + PICO_PER_MICRO // 2) // PICO_PER_MICRO
    return micro / 1_000_000
