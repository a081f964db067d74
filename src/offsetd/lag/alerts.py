"""Lag alert rules (sans-IO): seed 004's three patterns - an absolute threshold, a sustained rate
of change, time lag - and offsets about to expire, evaluated on looks at lag (lag.model) with the
caller's clock. Events out; notifying is the shell's job (lag/notify.py).

Each rule is judged per group on one number (a table, RULES), and each (rule, group) pair has its
own state with hysteresis so an alert neither fires on a blip nor flaps around its threshold:

    OK --(bad)--> PENDING --(bad for `for_ms`)--> FIRING  (a "firing" event)
    PENDING --(not bad)--> OK
    FIRING --(clear)--> RESOLVING --(clear for `for_ms`)--> OK  (a "resolved" event)
    RESOLVING --(not clear)--> FIRING

"bad" is value >= threshold (for expiry: seconds left <= the warning); "clear" needs the value
back past the threshold times `resolve_ratio` (0.8: a lag alert at 1,000 resolves below 800), so
a value hovering at the threshold keeps its state. A group that disappears resolves at once.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from .model import GroupLag, LagSnapshot


@dataclass(frozen=True)
class AlertRules:
    """The configured rules (lag.alert.* keys; None: that rule is off)."""

    lag_threshold: int | None = None           # records behind, summed over the group's partitions
    growth_rate: float | None = None           # records/s the group's lag grows by, over the window
    growth_window_ms: int = 300_000
    time_lag_threshold_ms: int | None = None   # age of the oldest unconsumed record
    expiry_warning_ms: int | None = None       # time left before the group's first offset expires
    for_ms: int = 60_000                       # how long a condition holds before firing / resolving
    resolve_ratio: float = 0.8
    include: re.Pattern[str] | None = None     # groups to watch (full match; None: all)
    exclude: re.Pattern[str] | None = None     # groups never watched

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.lag_threshold, self.growth_rate, self.time_lag_threshold_ms,
                                           self.expiry_warning_ms))

    def watches(self, group: str) -> bool:
        return ((self.include is None or self.include.fullmatch(group) is not None)
                and (self.exclude is None or self.exclude.fullmatch(group) is None))


@dataclass(frozen=True)
class Rule:
    """One kind of alert: the number it judges and whether higher is worse."""

    name: str
    unit: str
    threshold: Callable[[AlertRules], float | None]
    higher_is_worse: bool = True


RULES: tuple[Rule, ...] = (
    Rule("lag", "records", lambda r: r.lag_threshold),
    Rule("lag_growth", "records/s", lambda r: r.growth_rate),
    Rule("time_lag", "seconds", lambda r: None if r.time_lag_threshold_ms is None else r.time_lag_threshold_ms / 1000),
    Rule("offsets_expire", "seconds", lambda r: None if r.expiry_warning_ms is None else r.expiry_warning_ms / 1000,
         higher_is_worse=False),
)


class State(Enum):
    OK = "ok"
    PENDING = "pending"
    FIRING = "firing"
    RESOLVING = "resolving"


@dataclass(frozen=True)
class AlertEvent:
    """A rule started or stopped firing for a group (the webhook's JSON, see to_json)."""

    status: str            # "firing" or "resolved"
    rule: str
    group: str
    value: float | None    # the number judged (None: the group is gone)
    threshold: float
    unit: str
    at_ms: int             # when this was decided
    since_ms: int          # when the condition began (firing) or cleared (resolved)

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "rule": self.rule, "group": self.group, "value": self.value,
                "threshold": self.threshold, "unit": self.unit, "at_ms": self.at_ms, "since_ms": self.since_ms}


@dataclass
class _Track:
    state: State = State.OK
    since_ms: int = 0
    value: float | None = None


@dataclass
class _Growth:
    """A group's total lag over the growth window: (time ms, lag) samples, oldest first."""

    samples: deque[tuple[int, int]] = field(default_factory=deque)

    def rate(self, now: int, lag: int | None, window_ms: int) -> float | None:
        """Records/s the lag grew by across a full window (None until a window has been seen)."""
        if lag is None:
            self.samples.clear()
            return None
        self.samples.append((now, lag))
        while len(self.samples) > 2 and self.samples[1][0] <= now - window_ms:
            self.samples.popleft()  # keep one sample at or before the window's start
        first_at, first_lag = self.samples[0]
        if now - first_at < window_ms:
            return None
        return (lag - first_lag) * 1000 / (now - first_at)


class AlertEvaluator:
    """Holds the state of every (rule, group); `evaluate` takes one look and returns the events."""

    def __init__(self, rules: AlertRules) -> None:
        self.rules = rules
        self.tracks: dict[tuple[str, str], _Track] = {}
        self.growth: dict[str, _Growth] = {}

    def firing(self) -> list[tuple[str, str, float | None]]:
        """(rule, group, value) of every alert firing now (RESOLVING still counts as firing)."""
        return [(rule, group, t.value) for (rule, group), t in sorted(self.tracks.items())
                if t.state in (State.FIRING, State.RESOLVING)]

    def value(self, rule: Rule, group: GroupLag, now: int) -> float | None:
        """The number `rule` judges for `group` (None: nothing to judge)."""
        if rule.name == "lag":
            return group.total_lag
        if rule.name == "lag_growth":
            growth = self.growth.setdefault(group.group, _Growth())
            return growth.rate(now, group.total_lag, self.rules.growth_window_ms)
        if rule.name == "time_lag":
            worst = group.max_time_lag_ms
            return None if worst is None else worst / 1000
        return None if group.earliest_expiry_ms is None else max(0, group.earliest_expiry_ms - now) / 1000

    def evaluate(self, snapshot: LagSnapshot, now: int) -> list[AlertEvent]:
        events: list[AlertEvent] = []
        seen: set[str] = set()
        for group in snapshot.groups:
            if not self.rules.watches(group.group):
                continue
            seen.add(group.group)
            for rule in RULES:
                threshold = rule.threshold(self.rules)
                if threshold is None:
                    continue
                value = self.value(rule, group, now)
                event = self._step(rule, group.group, value, threshold, now)
                if event is not None:
                    events.append(event)
        for (rule_name, group_id), track in list(self.tracks.items()):
            if group_id in seen:
                continue
            del self.tracks[(rule_name, group_id)]
            self.growth.pop(group_id, None)
            if track.state in (State.FIRING, State.RESOLVING):
                rule = next(r for r in RULES if r.name == rule_name)
                events.append(AlertEvent("resolved", rule_name, group_id, None, rule.threshold(self.rules) or 0,
                                         rule.unit, now, now))
        return events

    def _step(self, rule: Rule, group: str, value: float | None, threshold: float, now: int) -> AlertEvent | None:
        """Advance one (rule, group) state machine by one observation."""
        track = self.tracks.setdefault((rule.name, group), _Track())
        track.value = value
        ratio = self.rules.resolve_ratio
        if value is None:
            bad, clear = False, True
        elif rule.higher_is_worse:
            bad, clear = value >= threshold, value < threshold * ratio
        else:
            bad, clear = value <= threshold, value > threshold / ratio
        # Two symmetric halves: from OK, "bad" leads through PENDING to FIRING; from FIRING,
        # "clear" leads through RESOLVING back to OK. Each crossing must hold for `for_ms`.
        firing_side = track.state in (State.FIRING, State.RESOLVING)
        settled, waiting = (State.FIRING, State.RESOLVING) if firing_side else (State.OK, State.PENDING)
        if not (clear if firing_side else bad):
            track.state = settled
            return None
        if track.state is settled:
            track.state, track.since_ms = waiting, now
        if now - track.since_ms < self.rules.for_ms:
            return None
        track.state = State.OK if firing_side else State.FIRING
        return AlertEvent("resolved" if firing_side else "firing", rule.name, group, value, threshold, rule.unit,
                          now, track.since_ms)


def rules_from_config(get: Callable[[str], object]) -> AlertRules:
    """AlertRules from the lag.alert.* keys (BrokerConfig.get, already parsed and validated)."""
    return AlertRules(
        lag_threshold=get("lag.alert.lag.threshold"),  # type: ignore[arg-type]
        growth_rate=get("lag.alert.lag.growth.rate"),  # type: ignore[arg-type]
        growth_window_ms=get("lag.alert.lag.growth.window.ms"),  # type: ignore[arg-type]
        time_lag_threshold_ms=get("lag.alert.time.lag.threshold.ms"),  # type: ignore[arg-type]
        expiry_warning_ms=get("lag.alert.expiry.warning.ms"),  # type: ignore[arg-type]
        for_ms=get("lag.alert.for.ms"),  # type: ignore[arg-type]
        resolve_ratio=get("lag.alert.resolve.ratio"),  # type: ignore[arg-type]
        include=get("lag.alert.groups.include"),  # type: ignore[arg-type]
        exclude=get("lag.alert.groups.exclude"),  # type: ignore[arg-type]
    )
