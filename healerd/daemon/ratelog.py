"""The API's rate-limited log lines: healerd.core.ratelog, which the loop uses too (its
state changes while the engine is away), named here for the daemon's modules."""

from __future__ import annotations

from healerd.core.ratelog import OVERFLOW_KIND, RateLimitedLog

__all__ = ["OVERFLOW_KIND", "RateLimitedLog"]
