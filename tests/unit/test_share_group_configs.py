"""Share group configs (broker/group_configs.py; share-groups.md §1): accepted values, refusals
with the key's name, and share.auto.offset.reset's by_duration parsing."""

from __future__ import annotations

import pytest

from offsetd.broker.group_configs import group_config_problem, session_heartbeat_problem, share_reset_duration_ms

BROKER = {"group.share.min.record.lock.duration.ms": 15000, "group.share.max.record.lock.duration.ms": 60000}


@pytest.mark.parametrize(("value", "ms"), [
    ("by_duration:PT1H", 3_600_000), ("by_duration:P1DT2H30M", 95_400_000), ("by_duration:PT0.5S", 500),
    ("by_duration:P2D", 172_800_000), ("by_duration:P", None), ("by_duration:PT", None), ("by_duration:", None),
    ("by_duration:-PT1H", None), ("by_duration:1H", None), ("earliest", None), ("latest", None),
])
def test_by_duration_takes_iso_8601_durations(value: str, ms: int | None) -> None:
    assert share_reset_duration_ms(value) == ms


@pytest.mark.parametrize(("key", "value", "refused"), [
    ("share.auto.offset.reset", "earliest", False), ("share.auto.offset.reset", "latest", False),
    ("share.auto.offset.reset", "by_duration:PT10M", False), ("share.auto.offset.reset", "none", True),
    ("share.auto.offset.reset", "by_duration", True),
    ("share.isolation.level", "read_committed", False), ("share.isolation.level", "READ_COMMITTED", True),
    ("share.record.lock.duration.ms", "15000", False), ("share.record.lock.duration.ms", "60000", False),
    ("share.record.lock.duration.ms", "14999", True), ("share.record.lock.duration.ms", "60001", True),
    ("share.record.lock.duration.ms", "soon", True), ("share.delivery.count.limit", "3", True),
])
def test_share_group_configs_are_checked_and_refusals_name_the_key(key: str, value: str, refused: bool) -> None:
    problem = group_config_problem(key, value, BROKER.__getitem__)
    assert (problem is not None) == refused
    if refused:
        assert key in problem


SESSION_BOUNDS = {"group.share.min.session.timeout.ms": 45000, "group.share.max.session.timeout.ms": 60000,
                  "group.share.min.heartbeat.interval.ms": 5000, "group.share.max.heartbeat.interval.ms": 15000,
                  "group.share.session.timeout.ms": 45000, "group.share.heartbeat.interval.ms": 5000,
                  "group.consumer.session.timeout.ms": 45000, "group.consumer.heartbeat.interval.ms": 5000}


@pytest.mark.parametrize(("key", "value", "refused"), [
    ("share.session.timeout.ms", "45000", False), ("share.session.timeout.ms", "60000", False),
    ("share.session.timeout.ms", "44999", True), ("share.session.timeout.ms", "60001", True),
    ("share.heartbeat.interval.ms", "5000", False), ("share.heartbeat.interval.ms", "15000", False),
    ("share.heartbeat.interval.ms", "4999", True), ("share.heartbeat.interval.ms", "15001", True),
])
def test_share_session_and_heartbeat_bounds(key: str, value: str, refused: bool) -> None:
    problem = group_config_problem(key, value, SESSION_BOUNDS.__getitem__)
    assert (problem is not None) == refused
    if refused:
        assert key in problem and "between" in problem


@pytest.mark.parametrize(("configs", "problem"), [
    ({}, None),
    ({"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "15000"}, None),
    ({"share.heartbeat.interval.ms": "15000"}, None),  # below the broker's 45 s session timeout
    ({"share.session.timeout.ms": "5000"}, "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"),
    ({"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "6000"},
     "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"),
])
def test_session_timeout_must_exceed_heartbeat_interval(configs: dict[str, str], problem: str | None) -> None:
    """Kafka's cross-field check: the group's value of each, else the broker's."""
    assert session_heartbeat_problem(configs, SESSION_BOUNDS.__getitem__) == problem
