"""The lag alert rules (lag/alerts.py) on scripted lag histories with a fake clock: each of seed
004's patterns and the expiry warning fires and resolves, with hysteresis (no flapping)."""

from __future__ import annotations

import re

import pytest

from offsetd.config import BrokerConfig, ConfigError
from offsetd.lag.alerts import AlertEvaluator, AlertRules, rules_from_config
from offsetd.lag.model import GroupLag, LagSnapshot, PartitionLag

SECOND = 1000


def look(now: int, groups: dict[str, tuple[int | None, int | None, int | None]]) -> LagSnapshot:
    """A look at lag: group -> (lag, time lag ms, earliest expiry ms), one partition each."""
    return LagSnapshot(now, [GroupLag(g, "Stable", "consumer", 1, [PartitionLag("t", 0, 0, 0, lag, lag, tl)], exp)
                             for g, (lag, tl, exp) in groups.items()])


def run(rules: AlertRules, script: list[tuple[int, dict]]) -> list[tuple[int, str, str, str]]:
    """Evaluate a scripted history; (time, status, rule, group) of every event."""
    evaluator = AlertEvaluator(rules)
    events = []
    for now, groups in script:
        events += [(now, e.status, e.rule, e.group) for e in evaluator.evaluate(look(now, groups), now)]
    return events


def every(seconds: int, values: list, build) -> list[tuple[int, dict]]:
    return [(i * seconds * SECOND, build(v)) for i, v in enumerate(values)]


def test_absolute_lag_fires_after_holding_and_resolves_below_the_ratio() -> None:
    rules = AlertRules(lag_threshold=1000, for_ms=20 * SECOND, resolve_ratio=0.8)
    lags = [0, 1200, 1200, 1200, 1200, 900, 900, 700, 700, 700, 700]
    events = run(rules, every(10, lags, lambda v: {"app": (v, None, None)}))
    # pending at 10 s, held 20 s -> fires at 30 s; 900 is not below 800: still firing;
    # below 800 from 70 s, held 20 s -> resolved at 90 s
    assert events == [(30_000, "firing", "lag", "app"), (90_000, "resolved", "lag", "app")]


def test_a_blip_shorter_than_for_ms_never_fires() -> None:
    rules = AlertRules(lag_threshold=1000, for_ms=30 * SECOND)
    events = run(rules, every(10, [0, 5000, 5000, 0, 5000, 0, 0], lambda v: {"app": (v, None, None)}))
    assert events == []


def test_hovering_at_the_threshold_does_not_flap() -> None:
    rules = AlertRules(lag_threshold=1000, for_ms=0, resolve_ratio=0.8)
    lags = [1000, 999, 1001, 950, 1010, 990, 810, 1000, 799]
    events = run(rules, every(10, lags, lambda v: {"app": (v, None, None)}))
    assert events == [(0, "firing", "lag", "app"), (80_000, "resolved", "lag", "app")]


def test_sustained_growth_fires_only_over_a_whole_window() -> None:
    # the consumer commits but falls behind by 20 records/s; the rule wants >= 10/s over 60 s
    rules = AlertRules(growth_rate=10, growth_window_ms=60 * SECOND, for_ms=0)
    growing = [i * 200 for i in range(10)]          # +200 per 10 s = 20 records/s
    flat = [growing[-1]] * 8                         # caught up with production: rate falls to 0
    events = run(rules, every(10, growing + flat, lambda v: {"app": (v, None, None)}))
    assert events[0] == (60_000, "firing", "lag_growth", "app")  # first full window
    assert events[1][1:] == ("resolved", "lag_growth", "app")
    assert len(events) == 2
    # a one-off jump of 5,000 records is 83 records/s over the 60 s window: below 100/s, no alert
    jump = [0, 0, 0, 5000] + [5000] * 12
    assert run(AlertRules(growth_rate=100, growth_window_ms=60 * SECOND, for_ms=0),
               every(10, jump, lambda v: {"app": (v, None, None)})) == []


def test_time_lag_fires_on_the_oldest_unconsumed_record() -> None:
    rules = AlertRules(time_lag_threshold_ms=60 * SECOND, for_ms=0)
    ages = [5 * SECOND, 61 * SECOND, 120 * SECOND, 47 * SECOND, 0]
    events = run(rules, every(10, ages, lambda v: {"app": (10, v, None)}))
    assert events == [(10_000, "firing", "time_lag", "app"), (30_000, "resolved", "time_lag", "app")]


def test_offsets_about_to_expire_warn_and_resolve_when_the_group_commits_again() -> None:
    rules = AlertRules(expiry_warning_ms=3600 * SECOND, for_ms=0, resolve_ratio=0.8)
    expiry = 10_000 * SECOND
    script = [(0, {"idle": (0, 0, expiry)}),                       # 10,000 s left
              (7000 * SECOND, {"idle": (0, 0, expiry)}),           # 3,000 s left: firing
              (7100 * SECOND, {"idle": (0, 0, expiry + 1000 * SECOND)}),  # 3,900 s: < 3600/0.8, still firing
              (7200 * SECOND, {"idle": (0, 0, expiry + 9000 * SECOND)})]  # a new commit: 11,800 s left
    assert run(rules, script) == [(7000 * SECOND, "firing", "offsets_expire", "idle"),
                                  (7200 * SECOND, "resolved", "offsets_expire", "idle")]


def test_a_group_that_disappears_resolves_and_filters_apply() -> None:
    rules = AlertRules(lag_threshold=10, for_ms=0, include=re.compile("app-.*"), exclude=re.compile("app-test"))
    script = [(0, {"app-1": (50, None, None), "app-test": (50, None, None), "other": (50, None, None)}),
              (SECOND, {})]
    assert run(rules, script) == [(0, "firing", "lag", "app-1"), (SECOND, "resolved", "lag", "app-1")]


def test_firing_alerts_are_listed_for_the_metrics() -> None:
    evaluator = AlertEvaluator(AlertRules(lag_threshold=10, for_ms=0))
    evaluator.evaluate(look(0, {"a": (50, None, None), "b": (5, None, None)}), 0)
    assert evaluator.firing() == [("lag", "a", 50)]


def test_rules_come_from_the_broker_keys_and_bad_values_name_the_key() -> None:
    rules = rules_from_config(BrokerConfig({"lag.alert.lag.threshold": "5000", "lag.alert.for.ms": "0",
                                            "lag.alert.groups.exclude": "tmp-.*"}).get)
    assert rules.lag_threshold == 5000 and rules.for_ms == 0 and rules.any
    assert not rules.watches("tmp-1") and rules.watches("orders")
    assert not rules_from_config(BrokerConfig({}).get).any  # every rule off by default
    with pytest.raises(ConfigError, match="lag.alert.groups.include"):
        BrokerConfig({"lag.alert.groups.include": "("})
    with pytest.raises(ConfigError, match="lag.alert.lag.growth.rate"):
        BrokerConfig({"lag.alert.lag.growth.rate": "0"})
