"""Kafka's column layout for tool output: each column left-aligned and padded to its width
(a minimum that grows with the longest value), one space between columns, the last column not
padded unless it has a fixed width. `-` stands for a missing value, as in ConsumerGroupCommand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

MISSING = "-"


@dataclass(frozen=True)
class Column:
    """One column: its header, minimum width (0: not padded, for a trailing column) and whether
    it grows to fit the longest value in it (Kafka grows group, topic, consumer-id, host)."""

    header: str
    width: int = 15
    grows: bool = False


def cell(value: Any) -> str:
    """A value as Kafka prints it: None is `-`."""
    return MISSING if value is None else str(value)


def layout(columns: Sequence[Column], rows: Sequence[Sequence[Any]]) -> list[int]:
    """The width of each column for these rows."""
    widths = []
    for i, column in enumerate(columns):
        width = column.width
        if column.grows:
            width = max([width] + [len(cell(row[i])) for row in rows])
        widths.append(width)
    return widths


def format_line(widths: Sequence[int], values: Sequence[Any]) -> str:
    """One line: `%-Ws` for every column joined by a space (width 0 means unpadded)."""
    return " ".join(cell(v).ljust(w) for v, w in zip(values, widths))


def render(columns: Sequence[Column], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Header line and row lines, laid out together."""
    widths = layout(columns, rows)
    return [format_line(widths, [c.header for c in columns])] + [format_line(widths, r) for r in rows]
