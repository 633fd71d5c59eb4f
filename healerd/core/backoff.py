"""Exponential backoff that is capped and never gives up (unlike supervisord's FATAL)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base: float
    cap: float

    def delay(self, failures: int) -> float:
        """Delay before retry number `failures` (1 = first retry)."""
        if failures <= 0:
            return 0.0
        # Bound the exponent so huge failure counts cannot overflow the float.
        exp = min(failures - 1, 64)
        return float(min(self.cap, self.base * (2**exp)))
