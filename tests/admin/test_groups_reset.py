"""`offsetd groups --reset-offsets` end to end against a real offsetd process: dry run changes
nothing, --execute moves a real consumer, datetimes and durations land on the right record,
--export / --from-file round trip, refusals, clamping, and the undo file restores the previous
offsets."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from groups_support import commit, committed, make_topic, module_broker, pad, run
from integration.group_helpers import GROUP_BROKER, Member, poll_until, unique

DRY_RUN_WARNING = ("WARN: No action will be performed as the --execute option is missing. In a future major "
                   "release, the default behavior of this command will be to prompt the user before executing "
                   "the reset rather than doing a dry run. You should add the --dry-run option explicitly if you "
                   "are scripting this command and want to keep the current default behavior without prompting.\n")
UNDO_LINE = re.compile(r"Saved the previous offsets to (.+?); undo with: (.+)\n")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    yield from module_broker(tmp_path_factory, "groups-reset", GROUP_BROKER)


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path, monkeypatch) -> None:
    """Run every test in its own directory: default undo files land there, not in the checkout."""
    monkeypatch.chdir(tmp_path)


def reset_table(rows: list[list[object]]) -> str:
    """Kafka's NEW-OFFSET table for `rows` of (group, topic, partition, offset)."""
    gw = max([15] + [len(str(r[0])) for r in rows])
    tw = max([15] + [len(str(r[1])) for r in rows])
    return "\n" + "".join(pad(r, [gw, tw, 10, 0]) + "\n" for r in [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + rows)


def test_dry_run_changes_nothing(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("t"), unique("g")
    make_topic(b, topic, [10, 10])
    commit(b, group, {(topic, 0): 7, (topic, 1): 9})
    assert run(capsys, b, "--group", group, "--reset-offsets", "--to-earliest", "--all-topics") == (
        0, reset_table([[group, topic, 0, 0], [group, topic, 1, 0]]), DRY_RUN_WARNING)
    assert run(capsys, b, "--group", group, "--reset-offsets", "--to-latest", "--topic", f"{topic}:1", "--dry-run") == (
        0, reset_table([[group, topic, 1, 10]]), "")
    assert committed(b, group) == {(topic, 0): 7, (topic, 1): 9}


def test_execute_moves_a_real_consumer_and_the_undo_file_restores(capsys, broker, tmp_path) -> None:
    b, topic, group = broker.bootstrap, unique("t"), unique("g")
    make_topic(b, topic, [10, 10, 10])
    commit(b, group, {(topic, 0): 8, (topic, 1): 9})
    code, out, err = run(capsys, b, "--group", group, "--reset-offsets", "--to-offset", "3", "--topic", topic, "--execute")
    assert (code, out) == (0, reset_table([[group, topic, p, 3] for p in range(3)]))
    match = UNDO_LINE.match(err)
    assert match, err
    undo = Path(match.group(1))
    assert undo.parent == tmp_path and undo.name.startswith(f"offsetd-reset-undo-{group}-")
    assert match.group(2) == (f"offsetd groups --bootstrap-server {b} --group {group} --reset-offsets "
                              f"--from-file {undo} --execute")
    # Partition 2 had no commit: the undo file cannot remove its new offset, and says so.
    assert err[match.end():] == (f"Note: {topic}-2 had no committed offset before this reset; the undo file cannot "
                                 "remove offsets (use --delete-offsets for that).\n")
    assert undo.read_text() == f"{topic},0,8\n{topic},1,9\n"
    assert committed(b, group) == {(topic, p): 3 for p in range(3)}

    member = Member(b, group, [topic], "m1", **{"auto.offset.reset": "latest"})
    try:
        poll_until([member], lambda: {m.partition() for m in member.messages} == {0, 1, 2}, message="messages")
        first = {}
        for m in member.messages:
            first.setdefault(m.partition(), (m.offset(), m.value()))
        assert first == {p: (3, f"{topic}-{p}-3".encode()) for p in range(3)}
    finally:
        member.close()

    # Undo: replay the saved file as printed.
    command = match.group(2).split()
    assert command[:4] == ["offsetd", "groups", "--bootstrap-server", b]
    code, out, err = run(capsys, b, *command[4:])
    assert (code, out) == (0, reset_table([[group, topic, 0, 8], [group, topic, 1, 9]]))
    assert committed(b, group)[(topic, 0)] == 8 and committed(b, group)[(topic, 1)] == 9


def test_to_datetime_lands_on_the_right_record(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("t"), unique("g")
    base = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=2)
    make_topic(b, topic, [10, 3], first_ts_ms=int(base.timestamp() * 1000), step_ms=1000)
    commit(b, group, {(topic, 0): 1, (topic, 1): 1})
    # 5.5 s after the first record: the first record at or after it is offset 6 (stamped +6 s).
    moment = base + timedelta(seconds=5, milliseconds=500)
    utc_text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + "500"
    code, out, err = run(capsys, b, "--group", group, "--reset-offsets", "--to-datetime", utc_text,
                         "--topic", f"{topic}:0", "--dry-run")
    assert (code, out, err) == (0, reset_table([[group, topic, 0, 6]]), "")
    # The same instant written in another zone lands on the same record.
    shifted = (moment + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.500+01:00")
    code, out, _ = run(capsys, b, "--group", group, "--reset-offsets", "--to-datetime", shifted,
                       "--topic", topic, "--execute")
    # Partition 1 has no record that late: Kafka's warning and the log end.
    assert out == (f"\nWarn: Partition 1 from topic {topic} is empty. Falling back to latest known offset.\n"
                   + reset_table([[group, topic, 0, 6], [group, topic, 1, 3]]))
    assert committed(b, group) == {(topic, 0): 6, (topic, 1): 3}


def test_by_duration(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("t"), unique("g")
    now = int(time.time() * 1000)
    make_topic(b, topic, [10], first_ts_ms=now - 100_000, step_ms=10_000)  # records at -100 s .. -10 s
    commit(b, group, {(topic, 0): 0})
    code, out, _ = run(capsys, b, "--group", group, "--reset-offsets", "--by-duration", "PT45S", "--all-topics", "--dry-run")
    assert (code, out) == (0, reset_table([[group, topic, 0, 6]]))  # first record no older than 45 s
    code, out, _ = run(capsys, b, "--group", group, "--reset-offsets", "--by-duration", "P1D", "--all-topics", "--dry-run")
    assert (code, out) == (0, reset_table([[group, topic, 0, 0]]))


def test_shift_clamping_and_shift_without_commit(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("t"), unique("g")
    make_topic(b, topic, [10, 10])
    commit(b, group, {(topic, 0): 4})
    code, out, err = run(capsys, b, "--group", group, "--reset-offsets", "--shift-by", "1", "--topic", topic, "--execute")
    assert (code, out, err) == (2, "", f"offsetd groups: Cannot shift offset for partition {topic}-1 since there is "
                                       "no current committed offset\n")
    code, out, err = run(capsys, b, "--group", group, "--reset-offsets", "--shift-by", "-6", "--topic", f"{topic}:0",
                         "--dry-run")
    assert (code, out, err) == (0, reset_table([[group, topic, 0, 0]]), f"WARN: New offset (-2) is lower than earliest "
                                f"offset for topic partition {topic}-0. Value will be set to 0.\n")
    code, out, err = run(capsys, b, "--group", group, "--reset-offsets", "--to-offset", "1000", "--topic", f"{topic}:0",
                         "--dry-run")
    assert (code, out, err) == (0, reset_table([[group, topic, 0, 10]]), f"WARN: New offset (1000) is higher than latest "
                                f"offset for topic partition {topic}-0. Value will be set to 10.\n")
    code, out, err = run(capsys, b, "--group", group, "--reset-offsets", "--to-offset", "1000", "--topic", f"{topic}:0",
                         "--dry-run", "--output", "json")
    assert json.loads(out)["groups"][0]["warnings"] == [
        f"New offset (1000) is higher than latest offset for topic partition {topic}-0. Value will be set to 10."]
    assert committed(b, group) == {(topic, 0): 4}


def test_export_then_from_file_and_to_current(capsys, broker, tmp_path) -> None:
    b, topic, group = broker.bootstrap, unique("t"), unique("g")
    make_topic(b, topic, [10, 10])
    commit(b, group, {(topic, 0): 2, (topic, 1): 5})
    code, out, _ = run(capsys, b, "--group", group, "--reset-offsets", "--shift-by", "3", "--all-topics", "--export")
    assert (code, out) == (0, f"{topic},0,5\n{topic},1,8\n\n")
    plan = tmp_path / "plan.csv"
    plan.write_text(out)
    code, out, err = run(capsys, b, "--group", group, "--reset-offsets", "--from-file", str(plan), "--execute",
                         "--undo-file", str(tmp_path / "undo.csv"))
    assert (code, out) == (0, reset_table([[group, topic, 0, 5], [group, topic, 1, 8]]))
    assert (tmp_path / "undo.csv").read_text() == f"{topic},0,2\n{topic},1,5\n"
    assert committed(b, group) == {(topic, 0): 5, (topic, 1): 8}
    code, out, _ = run(capsys, b, "--group", group, "--reset-offsets", "--to-current", "--all-topics", "--export")
    assert out == f"{topic},0,5\n{topic},1,8\n\n"
    # A plan for another group only: Kafka's error, nothing changed.
    other = tmp_path / "other.csv"
    other.write_text(f"someone-else,{topic},0,1\n")
    code, out, _ = run(capsys, b, "--group", group, "--reset-offsets", "--from-file", str(other), "--execute")
    assert (code, out) == (1, f"\nError: No reset plan for group {group} found.\n" + reset_table([]))
    assert committed(b, group) == {(topic, 0): 5, (topic, 1): 8}


def test_each_group_judged_independently_and_json(capsys, broker, tmp_path) -> None:
    b, topic = broker.bootstrap, unique("t")
    idle, busy = unique("idle"), unique("busy")
    make_topic(b, topic, [6])
    commit(b, idle, {(topic, 0): 1})
    member = Member(b, busy, [topic], "m1")
    try:
        poll_until([member], lambda: member.partitions() == {0}, message="assignment")
        member.consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        code, out, err = run(capsys, b, "--group", idle, "--group", busy, "--reset-offsets", "--to-latest",
                             "--topic", topic, "--execute", "--output", "json")
        doc = json.loads(out)
        undo = Path(doc["undo_file"])
        assert code == 1
        assert doc["dry_run"] is False and undo.parent == tmp_path
        assert doc["groups"] == [
            {"group": idle, "state": "Empty", "error": None, "warnings": [],
             "partitions": [{"topic": topic, "partition": 0, "previous_offset": 1, "new_offset": 6}]},
            {"group": busy, "state": "Stable", "partitions": [], "warnings": [],
             "error": f"Assignments can only be reset if the group '{busy}' is inactive, but the current state is Stable."}]
        # Only the group that changed is in the undo file and in the undo command.
        assert undo.read_text() == f"{topic},0,1\n"
        assert f"--group {idle} --reset-offsets --from-file {undo} --execute" in err and busy not in err.split("undo with")[1]
        assert committed(b, idle) == {(topic, 0): 6} and committed(b, busy) == {(topic, 0): 2}
    finally:
        member.close()


def test_unknown_partition_is_refused(capsys, broker) -> None:
    b, topic, group = broker.bootstrap, unique("t"), unique("g")
    make_topic(b, topic, [2])
    code, out, _ = run(capsys, b, "--group", group, "--reset-offsets", "--to-earliest", "--topic", f"{topic}:0,7",
                       "--execute")
    assert (code, out) == (1, f'\nError: Executing consumer group command failed due to The partitions "{topic}-7" '
                              'do not exist\n')
    assert committed(b, group) == {}
