"""Prometheus families of consumer lag under the names existing dashboards query (stub)."""

from __future__ import annotations

from typing import Iterator

from ..lag.model import LagSnapshot
from .snapshot import Slicer


def render_lag(snapshot: LagSnapshot, out: list[bytes], slicer: Slicer | None = None) -> Iterator[None]:
    """Cooperative generator appending the lag families' exposition text to `out`."""
    return iter(())
