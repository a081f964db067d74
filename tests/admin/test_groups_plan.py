"""Unit tests of the pure parts of `offsetd groups`: reset plans for every scenario, Kafka's
clamping and its warnings, the CSV format, lag arithmetic, and the Kafka table layouts."""

from __future__ import annotations

import pytest

from offsetd.admin.delete import format_delete_offsets
from offsetd.admin.describe import assignment_string, format_members, format_offsets, format_state, offset_rows
from offsetd.admin.errors import ToolError, UsageError
from offsetd.lag.compute import offset_lag, record_needed, time_lag_ms
from offsetd.admin.listing import format_listing, select
from offsetd.admin.model import TP, Committed, Coordinator, GroupDescription, GroupListing, LogBounds, Member
from offsetd.admin.reset import format_reset_table, undo_path_for
from offsetd.admin.reset_plan import PlanInputs, ResetSpec, compute_plan, format_csv, parse_csv

T0, T1, U0 = TP("t", 0), TP("t", 1), TP("u", 0)
BOUNDS = {T0: LogBounds(10, 100), T1: LogBounds(0, 50), U0: LogBounds(5, 5)}
COMMITTED = {T0: Committed(40), T1: Committed(45)}
INPUTS = PlanInputs(BOUNDS, COMMITTED, {T0: 70, T1: None})


@pytest.mark.parametrize("spec, partitions, offsets", [
    (ResetSpec("to-earliest"), [T0, T1, U0], {T0: 10, T1: 0, U0: 5}),
    (ResetSpec("to-latest"), [T0, T1, U0], {T0: 100, T1: 50, U0: 5}),
    (ResetSpec("to-current"), [T0, T1, U0], {T0: 40, T1: 45, U0: 5}),  # no commit: log end
    (ResetSpec("to-offset", value=30), [T0, T1], {T0: 30, T1: 30}),
    (ResetSpec("shift-by", value=-5), [T0, T1], {T0: 35, T1: 40}),
    (ResetSpec("shift-by", value=3), [T1], {T1: 48}),
    (ResetSpec("to-datetime", timestamp_ms=1), [T0], {T0: 70}),
    (ResetSpec("from-file", file_plan={"g": {T0: 20, T1: 7}}), [T0, T1], {T0: 20, T1: 7}),
])
def test_plan_per_scenario(spec: ResetSpec, partitions: list[TP], offsets: dict[TP, int]) -> None:
    plan = compute_plan("g", partitions, spec, INPUTS)
    assert (plan.offsets, plan.warnings, plan.notices) == (offsets, [], [])


def test_clamping_warnings_are_kafkas() -> None:
    plan = compute_plan("g", [T0, T1], ResetSpec("to-offset", value=60), INPUTS)
    assert plan.offsets == {T0: 60, T1: 50}
    assert plan.warnings == ["New offset (60) is higher than latest offset for topic partition t-1. "
                             "Value will be set to 50."]
    plan = compute_plan("g", [T0, T1], ResetSpec("shift-by", value=-42), INPUTS)
    assert plan.offsets == {T0: 10, T1: 3}
    assert plan.warnings == ["New offset (-2) is lower than earliest offset for topic partition t-0. "
                             "Value will be set to 10."]
    plan = compute_plan("g", [T0], ResetSpec("from-file", file_plan={"g": {T0: 1000}}), INPUTS)
    assert plan.offsets == {T0: 100} and len(plan.warnings) == 1


def test_shift_without_commit_is_refused() -> None:
    with pytest.raises(UsageError) as info:
        compute_plan("g", [T0, U0], ResetSpec("shift-by", value=1), INPUTS)
    assert str(info.value) == "Cannot shift offset for partition u-0 since there is no current committed offset"


def test_datetime_past_the_data_falls_back_to_log_end_with_kafkas_warning() -> None:
    plan = compute_plan("g", [T0, T1], ResetSpec("by-duration", timestamp_ms=5), INPUTS)
    assert plan.offsets == {T0: 70, T1: 50}
    assert plan.notices == ["\nWarn: Partition 1 from topic t is empty. Falling back to latest known offset.\n"]


def test_missing_log_offsets_is_kafkas_error() -> None:
    with pytest.raises(ToolError, match="Error getting starting offset of topic partition: v-0"):
        compute_plan("g", [TP("v", 0)], ResetSpec("to-earliest"), INPUTS)


def test_csv_round_trip_single_and_multi_group() -> None:
    plans = {"g": {T1: 7, T0: 20}, "h": {U0: 5}}
    assert format_csv({"g": plans["g"]}, with_group=False) == "t,0,20\nt,1,7\n"
    text = format_csv(plans, with_group=True)
    assert text == "g,t,0,20\ng,t,1,7\nh,u,0,5\n"
    assert parse_csv(text, [], "x") == plans
    assert parse_csv("t,0,20\n\nt,1,7\n\n", ["g"], "x") == {"g": {T0: 20, T1: 7}}  # --export's blank tail
    # a group id with a comma survives the round trip (CSV quoting)
    assert parse_csv(format_csv({"a,b": {T0: 1}}, with_group=True), [], "x") == {"a,b": {T0: 1}}


def test_lag_is_clamped_at_log_start_and_never_negative() -> None:
    bounds = LogBounds(10, 100)
    assert offset_lag(40, bounds) == 60
    assert offset_lag(3, bounds) == 90           # below log start: only existing records count
    assert offset_lag(150, bounds) == 0          # past the end (e.g. topic recreated): no lag
    assert offset_lag(None, bounds) is None      # no commit: '-'
    assert offset_lag(40, None) is None          # no log offsets: '-'
    assert record_needed(3, bounds) == 10 and record_needed(40, bounds) == 40
    assert record_needed(100, bounds) is None and record_needed(None, bounds) is None


def test_time_lag() -> None:
    bounds = LogBounds(0, 10)
    assert time_lag_ms(4, bounds, 1_000, now_ms=61_000) == 60_000
    assert time_lag_ms(10, bounds, None, now_ms=61_000) == 0        # caught up
    assert time_lag_ms(4, bounds, None, now_ms=61_000) is None      # record not read
    assert time_lag_ms(4, bounds, 70_000, now_ms=61_000) == 0       # producer clock ahead
    assert time_lag_ms(None, bounds, 1_000, now_ms=61_000) is None


def _member(cid: str, parts: tuple[TP, ...], instance: str | None = None) -> Member:
    return Member(cid, instance, f"client-{cid}", "/10.0.0.1", parts)


GROUP = GroupDescription("orders-app", "Stable", "Classic", "range", Coordinator(1, "broker1", 9092), (
    _member("consumer-a-long-member-id-1", (TP("orders", 2),)),
    _member("consumer-b", (TP("orders", 1), TP("orders", 0))),
    _member("consumer-idle", ()),
))


def test_offsets_view_order_and_golden_layout() -> None:
    committed = {TP("orders", 0): Committed(5, 3), TP("orders", 2): Committed(9), TP("old", 0): Committed(1)}
    bounds = {TP("orders", 0): LogBounds(0, 8), TP("orders", 1): LogBounds(0, 4), TP("orders", 2): LogBounds(0, 9),
              TP("old", 0): None}
    rows = offset_rows(GROUP, committed, bounds, {(TP("orders", 0), 5): 1_000}, now_ms=91_000)
    # members with most partitions first, then unowned committed partitions
    assert [(r.tp, r.consumer_id) for r in rows] == [
        (TP("orders", 0), "consumer-b"), (TP("orders", 1), "consumer-b"),
        (TP("orders", 2), "consumer-a-long-member-id-1"), (TP("old", 0), "-")]
    assert format_offsets(rows, verbose=False) == (
        "\n"
        "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID                 HOST            CLIENT-ID\n"
        "orders-app      orders          0          5               8               3               consumer-b                  /10.0.0.1       client-consumer-b\n"
        "orders-app      orders          1          -               4               -               consumer-b                  /10.0.0.1       client-consumer-b\n"
        "orders-app      orders          2          9               9               0               consumer-a-long-member-id-1 /10.0.0.1       client-consumer-a-long-member-id-1\n"
        "orders-app      old             0          1               -               -               -                           -               -\n")
    assert format_offsets(rows[:1], verbose=True) == (
        "\n"
        "GROUP           TOPIC           PARTITION  LEADER-EPOCH    CURRENT-OFFSET  LOG-END-OFFSET  LAG             LAG-TIME        CONSUMER-ID     HOST            CLIENT-ID\n"
        "orders-app      orders          0          3               5               8               3               PT1M30S         consumer-b      /10.0.0.1       client-consumer-b\n")


def test_members_view_golden_layout() -> None:
    assert format_members(GROUP, verbose=False) == (
        "\n"
        "GROUP           CONSUMER-ID                 HOST            CLIENT-ID                          #PARTITIONS     \n"
        "orders-app      consumer-a-long-member-id-1 /10.0.0.1       client-consumer-a-long-member-id-1 1               \n"
        "orders-app      consumer-b                  /10.0.0.1       client-consumer-b                  2               \n"
        "orders-app      consumer-idle               /10.0.0.1       client-consumer-idle               0               \n")
    static = GroupDescription("g", "Stable", "Classic", "range", None, (_member("m", (T0, T1, U0), "inst-1"),))
    assert format_members(static, verbose=True) == (
        "\n"
        "GROUP           CONSUMER-ID     GROUP-INSTANCE-ID HOST            CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT   \n"
        "g               m               inst-1            /10.0.0.1       client-m        3               -               t:0,1;u:0            -               -                   \n")
    assert assignment_string(()) == "-"


CONSUMER_GROUP = GroupDescription(
    "cg", "Reconciling", "Consumer", "uniform", Coordinator(1, "broker1", 9092), (
        Member("m1", None, "c1", "/10.0.0.1", (T0, T1), member_epoch=7, target_assignment=(T0,), upgraded=True),
        Member("m2", None, "c2", "/10.0.0.2", (), member_epoch=6, target_assignment=(T1, U0), upgraded=True)),
    group_epoch=8, target_assignment_epoch=8)


def test_consumer_group_members_verbose_shows_epochs_and_target_assignments() -> None:
    assert format_members(CONSUMER_GROUP, verbose=True) == (
        "\n"
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT   \n"
        "cg              m1              /10.0.0.1       c1              2               7               t:0,1                8               t:0                 \n"
        "cg              m2              /10.0.0.2       c2              0               6               -                    8               t:1;u:0             \n")
    # a classic-protocol member in a consumer group: UPGRADED shows who speaks which protocol
    classic = Member("m3-classic", None, "c3", "/10.0.0.3", (U0,), member_epoch=8,
                     target_assignment=(U0, TP("a-long-topic-name", 11)), upgraded=False)
    mixed = GroupDescription("cg", "Stable", "Consumer", "uniform", None, (CONSUMER_GROUP.members[0], classic),
                             group_epoch=8, target_assignment_epoch=8)
    assert format_members(mixed, verbose=True) == (
        "\n"
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT        UPGRADED\n"
        "cg              m1              /10.0.0.1       c1              2               7               t:0,1                8               t:0                      true\n"
        "cg              m3-classic      /10.0.0.3       c3              1               8               u:0                  8               a-long-topic-name:11;u:0 false\n")


def test_consumer_group_state_verbose_shows_its_epochs() -> None:
    assert format_state(CONSUMER_GROUP, verbose=True) == (
        "\n"
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                GROUP-EPOCH     TARGET-ASSIGNMENT-EPOCH   #MEMBERS\n"
        "cg              broker1:9092  (1)         uniform              Reconciling          8               8                         2\n")
    assert format_state(GROUP, verbose=True).splitlines()[2].split() == [
        "orders-app", "broker1:9092", "(1)", "range", "Stable", "-", "-", "3"]


def test_state_view_golden_layout() -> None:
    assert format_state(GROUP, verbose=False) == (
        "\n"
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                #MEMBERS\n"
        "orders-app      broker1:9092  (1)         range                Stable               3\n")


def test_list_views() -> None:
    listings = [GroupListing("a", "Stable", "Classic"), GroupListing("b-group", "Empty", "Classic"),
                GroupListing("c", "Empty", "Consumer")]
    assert format_listing(listings, False, False) == "a\nb-group\nc\n"
    assert format_listing(select(listings, frozenset({"Empty"}), frozenset()), False, True) == (
        "GROUP                     STATE               \n"
        "b-group                   Empty               \n"
        "c                         Empty               \n")
    assert format_listing(select(listings, frozenset(), frozenset({"Consumer"})), True, False) == (
        "GROUP                     TYPE                \n"
        "c                         Consumer            \n")


def test_reset_and_delete_offsets_tables() -> None:
    assert format_reset_table({"g": {T1: 7, T0: 20}, "idle": {}}) == (
        "\n"
        "GROUP           TOPIC           PARTITION  NEW-OFFSET\n"
        "g               t               0          20\n"
        "g               t               1          7\n")
    assert format_delete_offsets({T0: None, TP("gone", -1): "This server does not host this topic-partition."}) == (
        "\n"
        "TOPIC           PARTITION  STATUS         \n"
        "gone            -          Error: This server does not host this topic-partition.\n"
        "t               0          Successful     \n")


def test_undo_path_is_fresh_and_safe(tmp_path) -> None:
    from datetime import datetime, timezone

    now = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
    first = undo_path_for(["my/group"], now, tmp_path)
    assert first == tmp_path / "offsetd-reset-undo-my_group-20250304T050607Z.csv"
    first.write_text("")
    assert undo_path_for(["my/group"], now, tmp_path) == tmp_path / "offsetd-reset-undo-my_group-20250304T050607Z-1.csv"
    assert undo_path_for(["a", "b"], now, tmp_path) == tmp_path / "offsetd-reset-undo-20250304T050607Z.csv"
