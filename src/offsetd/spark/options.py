"""Option values shared by the Spark sources: parsed as Spark parses its own, and an invalid
value is a ValueError that names the option."""

from __future__ import annotations

import re
from typing import Mapping

BOOLEANS = {"true": True, "false": False}
US_PER_MS = 1000
# maxTriggerDelay units (Spark's time strings; no unit = milliseconds), in microseconds.
TIME_UNITS_US = {"us": 1, "ms": 1000, "s": 1_000_000, "m": 60_000_000, "min": 60_000_000,
                 "h": 3_600_000_000, "d": 86_400_000_000}
TIME_STRING = re.compile(r"([0-9]+)([a-z]+)?")
DEFAULT_MAX_TRIGGER_DELAY = "15m"


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


def option_duration_ms(name: str, text: str) -> int:
    """A Spark time string such as 15m, 2s, 500ms (no unit = ms), in milliseconds."""
    match = TIME_STRING.fullmatch(text.strip().lower())
    if match is None or (match[2] or "ms") not in TIME_UNITS_US:
        raise ValueError(f"option {name} must be a duration such as 15m, 30s or 500ms "
                         f"(units {', '.join(TIME_UNITS_US)}), got {text!r}")
    return int(match[1]) * TIME_UNITS_US[match[2] or "ms"] // US_PER_MS


class TriggerOptions:
    """The admission control options of a stream, validated: maxOffsetsPerTrigger,
    minOffsetsPerTrigger (at most maxOffsetsPerTrigger) and maxTriggerDelay (default 15m)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.max_per_trigger = option_positive_int(options, "maxOffsetsPerTrigger")
        self.min_per_trigger = option_positive_int(options, "minOffsetsPerTrigger")
        if self.min_per_trigger is not None and self.max_per_trigger is not None \
                and self.min_per_trigger > self.max_per_trigger:
            raise ValueError(f"option minOffsetsPerTrigger ({self.min_per_trigger}) is higher than "
                             f"maxOffsetsPerTrigger ({self.max_per_trigger})")
        self.max_trigger_delay_ms = option_duration_ms(
            "maxTriggerDelay", options.get("maxTriggerDelay") or DEFAULT_MAX_TRIGGER_DELAY)
