"""Option values shared by the Spark sources: parsed as Spark parses its own, and an invalid
value is a ValueError that names the option."""

from __future__ import annotations

from typing import Mapping

BOOLEANS = {"true": True, "false": False}


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """A true/false option (case-insensitive, as Spark's toBoolean)."""
    text = options.get(name)
    if not text:
        return default
    if text.strip().lower() not in BOOLEANS:
        raise ValueError(f"option {name} must be true or false, got {text!r}")
    return BOOLEANS[text.strip().lower()]


def option_positive_int(options: Mapping[str, str], name: str) -> int | None:
    """A count option such as maxOffsetsPerTrigger: a positive integer, or None when unset."""
    text = options.get(name)
    if not text:
        return None
    if not text.strip().isdigit() or int(text) <= 0:
        raise ValueError(f"option {name} must be a positive integer, got {text!r}")
    return int(text)
