"""Time arguments of `--reset-offsets`: Kafka's `--to-datetime` format and ISO-8601 durations
for `--by-duration` (Java's `Duration.parse` grammar), plus the same duration notation for
printing time lag. Pure functions; written here rather than pulling in a date library."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from .errors import UsageError

# YYYY-MM-DDTHH:mm:SS[.sss][zone]. Kafka documents the milliseconds as part of the format; they
# are optional here. Zone: Z, +hh, +hhmm or +hh:mm; absent means UTC (Kafka appends "Z").
_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?", re.IGNORECASE)

# Java Duration.parse: [+-]P[nD][T[nH][nM][n[.fraction]S]], case-insensitive, each number signed.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?)(\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_kafka_datetime(text: str) -> int:
    """Epoch milliseconds of a `--to-datetime` value; UsageError when malformed."""
    match = _DATETIME.fullmatch(text.strip())
    if not match:
        raise UsageError(f"Invalid datetime '{text}': expected format 'YYYY-MM-DDTHH:mm:SS.sss' "
                         "with an optional zone (Z, +hh:mm); no zone means UTC")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zone = match.group(7), match.group(8)
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=_zone(zone))
    except ValueError as exc:
        raise UsageError(f"Invalid datetime '{text}': {exc}") from None
    micros = int((fraction or "0").ljust(6, "0")[:6])
    return int(moment.timestamp()) * 1000 + micros // 1000


def _zone(zone: str | None) -> timezone:
    """A fixed-offset zone from `Z`, `+hh`, `+hhmm` or `+hh:mm` (None: UTC)."""
    if zone is None or zone.upper() == "Z":
        return timezone.utc
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if hours > 18 or minutes > 59:
        raise ValueError(f"zone offset {zone} out of range")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def parse_iso_duration(text: str) -> int:
    """Milliseconds of an ISO-8601 duration `PnDTnHnMn.nS` (Java `Duration.parse`); UsageError
    when malformed. Negative components are allowed, as in Java."""
    match = _DURATION.fullmatch(text.strip())
    if match:
        sign_all, days, hours, minutes, sec_sign, secs, frac = match.groups()
        time_part = (hours, minutes, secs) != (None, None, None)
    # Java rejects "P", "PT" and "P1DT": at least one unit, and a 'T' must be followed by one.
    if not match or not (days is not None or time_part) or ("T" in text.upper() and not time_part):
        raise UsageError(f"Invalid duration '{text}': expected ISO-8601 format 'PnDTnHnMnS', "
                         "e.g. PT30M, P1DT12H, PT0.5S")
    seconds_ms = int(secs or 0) * 1000 + int((frac or "").ljust(3, "0")[:3] or 0)
    total = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
             + (-seconds_ms if sec_sign == "-" else seconds_ms))
    return -total if sign_all == "-" else total


def format_duration_ms(ms: int) -> str:
    """A non-negative duration in the notation `--by-duration` reads (`PT1H2M3.456S`), so a
    LAG-TIME value can be pasted into a reset; days are written as hours, like Java's
    `Duration.toString()`."""
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    parts = ["PT", f"{hours}H" if hours else "", f"{minutes}M" if minutes else ""]
    if seconds or millis or not (hours or minutes):
        parts.append(f"{seconds}.{millis:03d}".rstrip("0").rstrip(".") + "S")
    return "".join(parts)
