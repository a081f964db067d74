"""Per-group configs (KIP-848's GROUP config resource), persisted in `<log.dirs>/group-configs.json`.

Served: `offsets.retention.minutes` (a group may keep its offsets longer or shorter than the broker
default, or forever (-1); users have asked for this since KAFKA-4682), and a consumer group's own
`consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` (reference B1), within the
broker's `group.consumer.min/max.*` bounds; a share group's `share.auto.offset.reset` and
`share.isolation.level` (KIP-932, share-groups.md §1), whose defaults are Kafka's, not a broker key,
and its `share.record.lock.duration.ms`, `share.session.timeout.ms` and `share.heartbeat.interval.ms`
within the broker's `group.share.min/max.*` bounds. A group's session timeout must stay above its
heartbeat interval, either taken from the broker when the group does not set it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from ..storage.durable_file import write_durably

RETENTION_KEY = "offsets.retention.minutes"
SESSION_TIMEOUT_KEY = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL_KEY = "consumer.heartbeat.interval.ms"
SHARE_AUTO_OFFSET_RESET_KEY = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL_KEY = "share.isolation.level"
SHARE_KEYS = {SHARE_AUTO_OFFSET_RESET_KEY: "latest", SHARE_ISOLATION_LEVEL_KEY: "read_uncommitted"}
"""The share group configs and their defaults (string values, no broker-wide key in Kafka 4.2)."""
SHARE_LOCK_DURATION_KEY = "share.record.lock.duration.ms"
SHARE_SESSION_TIMEOUT_KEY = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_KEY = "share.heartbeat.interval.ms"
GROUP_KEYS = (RETENTION_KEY, SESSION_TIMEOUT_KEY, HEARTBEAT_INTERVAL_KEY, *SHARE_KEYS, SHARE_LOCK_DURATION_KEY,
              SHARE_SESSION_TIMEOUT_KEY, SHARE_HEARTBEAT_INTERVAL_KEY)
BROKER_KEYS = {RETENTION_KEY: RETENTION_KEY, SESSION_TIMEOUT_KEY: "group.consumer.session.timeout.ms",
               HEARTBEAT_INTERVAL_KEY: "group.consumer.heartbeat.interval.ms",
               SHARE_LOCK_DURATION_KEY: "group.share.record.lock.duration.ms",
               SHARE_SESSION_TIMEOUT_KEY: "group.share.session.timeout.ms",
               SHARE_HEARTBEAT_INTERVAL_KEY: "group.share.heartbeat.interval.ms"}
"""Each integer group config's broker-wide default."""
SESSION_HEARTBEAT_PAIRS = ((SESSION_TIMEOUT_KEY, HEARTBEAT_INTERVAL_KEY),
                           (SHARE_SESSION_TIMEOUT_KEY, SHARE_HEARTBEAT_INTERVAL_KEY))
"""(session timeout, heartbeat interval) keys whose values are checked together."""

# share.auto.offset.reset's by_duration:<ISO-8601 duration> (Java's Duration.parse: days, hours,
# minutes, seconds with a fraction; never negative here).
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def share_reset_duration_ms(value: str) -> int | None:
    """The look-back of `by_duration:<ISO-8601>` in ms; None for earliest, latest or a bad value."""
    if not value.startswith("by_duration:"):
        return None
    match = _DURATION.fullmatch(value.removeprefix("by_duration:"))
    if match is None or match.group(0).upper() in ("P", "PT") or match.group(0).upper().endswith("T"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def _share_problem(key: str, value: str | None) -> str | None:
    """Why a share group config cannot take `value`, or None."""
    if key == SHARE_ISOLATION_LEVEL_KEY:
        if value in ("read_committed", "read_uncommitted"):
            return None
        return f"Invalid value {value} for configuration {key}: String must be one of: read_committed, read_uncommitted"
    if value in ("earliest", "latest") or share_reset_duration_ms(value or "") is not None:
        return None
    return (f"Invalid value {value} for configuration {key}: must be earliest, latest or "
            "by_duration:<ISO-8601 duration> such as by_duration:PT1H")


def group_config_problem(key: str, value: str | None, broker_config: Callable[[str], Any]) -> str | None:
    """Why a group config cannot be set to `value` (INVALID_CONFIG), or None; `broker_config`
    looks up the broker's keys (the consumer configs' bounds)."""
    if key not in GROUP_KEYS:
        return f"Unknown group config name: {key}"
    if key in SHARE_KEYS:
        return _share_problem(key, value)
    try:
        number = int(value or "")
    except ValueError:
        return f"Invalid value {value} for configuration {key}: expected an integer"
    if key == RETENTION_KEY:
        if number == 0 or number < -1:
            return f"Invalid value {value} for configuration {key}: must be -1 (never expire) or at least 1"
        return None
    kind, what = key.split(".", 1)  # consumer.session.timeout.ms, share.record.lock.duration.ms
    lo, hi = broker_config(f"group.{kind}.min.{what}"), broker_config(f"group.{kind}.max.{what}")
    if not lo <= number <= hi:
        return f"Invalid value {value} for configuration {key}: must be between {lo} and {hi}"
    return None


def session_heartbeat_problem(configs: dict[str, str], broker_config: Callable[[str], Any]) -> str | None:
    """Why a group's configs after a change cannot stand (INVALID_CONFIG): a session timeout not
    above its heartbeat interval, the one the group does not set being the broker's; or None."""
    for session_key, heartbeat_key in SESSION_HEARTBEAT_PAIRS:
        if session_key not in configs and heartbeat_key not in configs:
            continue
        session = int(configs.get(session_key) or broker_config(BROKER_KEYS[session_key]))
        heartbeat = int(configs.get(heartbeat_key) or broker_config(BROKER_KEYS[heartbeat_key]))
        if session <= heartbeat:
            return f"{session_key} must be greater than {heartbeat_key}"
    return None


class GroupConfigs:
    """Group id -> {key: value}; every change is written through atomically."""

    def __init__(self, root: Path | None) -> None:
        """From `<root>/group-configs.json`; root None: in memory only (cluster mode fills it)."""
        self._path = root / "group-configs.json" if root is not None else None
        self._configs: dict[str, dict[str, str]] = (
            json.loads(self._path.read_text(encoding="utf-8")) if self._path and self._path.exists() else {})

    def get(self, group_id: str) -> dict[str, str]:
        return dict(self._configs.get(group_id, {}))

    def items(self) -> list[tuple[str, dict[str, str]]]:
        return [(g, dict(c)) for g, c in self._configs.items()]

    def update(self, group_id: str, changes: dict[str, str | None]) -> Any:
        """Set keys (None deletes one) and persist."""
        self.apply(group_id, changes)
        write_durably(self._path, json.dumps(self._configs, indent=1, sort_keys=True))

    def apply(self, group_id: str, changes: dict[str, str | None]) -> dict[str, str]:
        """Change the group's configs in memory; the group's configs after the change."""
        configs = self._configs.setdefault(group_id, {})
        for key, value in changes.items():
            if value is None:
                configs.pop(key, None)
            else:
                configs[key] = value
        if not configs:
            del self._configs[group_id]
        return dict(configs)

    def replace_all(self, configs: dict[str, dict[str, str]]) -> list[str]:
        """Take every group's configs as given (cluster mode: from PostgreSQL); the groups whose
        configs changed."""
        changed = [g for g in set(configs) | set(self._configs) if configs.get(g) != self._configs.get(g)]
        self._configs = {g: dict(c) for g, c in configs.items() if c}
        return changed


def consumer_overrides(configs: dict[str, str]) -> tuple[int | None, int | None]:
    """The group's own (session timeout, heartbeat interval) in ms; None where it uses the broker's."""
    session, interval = configs.get(SESSION_TIMEOUT_KEY), configs.get(HEARTBEAT_INTERVAL_KEY)
    return (None if session is None else int(session)), (None if interval is None else int(interval))


def share_overrides(configs: dict[str, str]) -> tuple[int | None, int | None]:
    """The share group's own (session timeout, heartbeat interval) in ms; None where it uses the broker's."""
    session, interval = configs.get(SHARE_SESSION_TIMEOUT_KEY), configs.get(SHARE_HEARTBEAT_INTERVAL_KEY)
    return (None if session is None else int(session)), (None if interval is None else int(interval))


def retention_ms(configs: dict[str, str]) -> int | None:
    """The group's retention in ms (-1 = never), or None when it uses the broker default."""
    if RETENTION_KEY not in configs:
        return None
    minutes = int(configs[RETENTION_KEY])
    return -1 if minutes < 0 else minutes * 60 * 1000
