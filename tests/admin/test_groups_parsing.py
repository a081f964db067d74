"""Unit tests of `offsetd groups` input handling: --topic arguments, Kafka datetimes, ISO-8601
durations, properties files, and option validation (every bad input is one line and exit 2,
before any connection is attempted: the bootstrap address below has nothing listening)."""

from __future__ import annotations

import re

import pytest

from offsetd.admin.client_config import build_client_config, kafka_python_config
from offsetd.config import parse_properties
from offsetd.admin.errors import UsageError
from offsetd.admin.groups_cli import main
from offsetd.admin.time_args import format_duration_ms, parse_iso_duration, parse_kafka_datetime
from offsetd.admin.topic_args import TopicArg, parse_topic_arg

NOWHERE = "127.0.0.1:1"  # nothing listens: a test that reached the cluster would fail with exit 1


@pytest.mark.parametrize("arg, expected", [
    ("orders", TopicArg("orders", None)),
    ("orders:0", TopicArg("orders", (0,))),
    ("orders:2,0,1", TopicArg("orders", (2, 0, 1))),
    ("orders:1,1", TopicArg("orders", (1,))),
    ("a.b_c-d:10", TopicArg("a.b_c-d", (10,))),
])
def test_topic_arg_parses(arg: str, expected: TopicArg) -> None:
    assert parse_topic_arg(arg) == expected


@pytest.mark.parametrize("arg, message", [
    ("orders:", "Invalid topic arg 'orders:', expected topic name and partitions"),
    (":0", "Invalid topic arg ':0', expected topic name and partitions"),
    ("orders:0:1", "Invalid topic arg 'orders:0:1', expected topic name and partitions"),
    ("orders:x", "Invalid partition 'x' specified in topic arg 'orders:x'"),
    ("orders:0,,1", "Invalid partition '' specified in topic arg 'orders:0,,1'"),
    ("orders:-1", "Invalid partition '-1' specified in topic arg 'orders:-1'"),
])
def test_topic_arg_rejects_malformed(arg: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_topic_arg(arg)
    assert str(info.value) == message


def test_topic_arg_rejects_illegal_names() -> None:
    for arg in ("", "a b", "x" * 250, "tö"):
        with pytest.raises(UsageError, match="is not a legal topic name"):
            parse_topic_arg(arg)


@pytest.mark.parametrize("text, epoch_ms", [
    ("2024-01-02T03:04:05.678", 1704164645678),          # no zone: UTC, as Kafka appends Z
    ("2024-01-02T03:04:05.678Z", 1704164645678),
    ("2024-01-02T03:04:05.678+01:00", 1704161045678),
    ("2024-01-02T03:04:05.678-0130", 1704170045678),
    ("2024-01-02T03:04:05.678+02", 1704157445678),
    ("2024-01-02T03:04:05", 1704164645000),              # milliseconds may be left out
    ("1970-01-01T00:00:00.000", 0),
])
def test_kafka_datetime(text: str, epoch_ms: int) -> None:
    assert parse_kafka_datetime(text) == epoch_ms


@pytest.mark.parametrize("text", ["2024-01-02", "2024-01-02 03:04:05.000", "2024-13-01T00:00:00.000",
                                  "2024-02-30T00:00:00.000", "2024-01-02T03:04:05.000+19:00", "yesterday",
                                  "2024-01-02T03:04:05.000 UTC"])
def test_kafka_datetime_rejects(text: str) -> None:
    with pytest.raises(UsageError, match=re.escape(f"Invalid datetime '{text}'")):
        parse_kafka_datetime(text)


@pytest.mark.parametrize("text, ms", [
    ("PT30M", 1_800_000), ("P1D", 86_400_000), ("P1DT2H3M4.5S", 93_784_500), ("pt5m", 300_000),
    ("PT0.001S", 1), ("PT-1.5S", -1_500), ("-PT10M", -600_000), ("P-1DT1H", -82_800_000), ("PT0S", 0),
    ("PT1,25S", 1_250),
])
def test_iso_duration(text: str, ms: int) -> None:
    assert parse_iso_duration(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "P1DT", "1H", "P1H", "PT1H2D", "PT1.5M", "P1W", "", "PT 1S"])
def test_iso_duration_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="Invalid duration"):
        parse_iso_duration(text)


@pytest.mark.parametrize("ms, text", [(0, "PT0S"), (1, "PT0.001S"), (1_500, "PT1.5S"), (60_000, "PT1M"),
                                      (3_723_456, "PT1H2M3.456S"), (90_000_000, "PT25H")])
def test_duration_format_round_trips(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text
    assert parse_iso_duration(text) == ms


def test_properties_file_syntax() -> None:
    text = ("# comment\n! other comment\n\nsecurity.protocol=SASL_SSL\nsasl.mechanism : PLAIN\n"
            "client.id my-tool\nlong.value=a,\\\n    b\n")
    assert parse_properties(text) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                      "client.id": "my-tool", "long.value": "a,b"}


def test_command_config_translates_jaas_and_kafka_python(tmp_path) -> None:
    path = tmp_path / "client.properties"
    path.write_text('security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config='
                    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                    'password="s3cret";\nbootstrap.servers=ignored:1\n')
    config = build_client_config("b:9092", str(path))
    assert config == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                      "sasl.password": "s3cret", "bootstrap.servers": "b:9092"}
    assert kafka_python_config(config) == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
        "sasl_plain_password": "s3cret", "bootstrap_servers": "b:9092"}


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# argv (after --bootstrap-server NOWHERE unless it is the missing one) -> the one error line
BAD_INPUT: list[tuple[list[str], str]] = [
    ([], "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets"),
    (["--list", "--describe", "--group", "g"], "Command must include exactly one action: --list, --describe, "
     "--delete, --reset-offsets, --delete-offsets"),
    (["--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
    (["--describe", "--group", "g", "--members", "--state"],
     "Option [describe] takes at most one of these options: [members], [offsets], [state], [health]"),
    (["--describe", "--group", "g", "--state", "stable"], "Option [describe] does not take a value for [state]"),
    (["--describe", "--group", "g", "--all-groups"], 'Option "[group]" can\'t be used with option "[all-groups]"'),
    (["--describe", "--group", "g", "--topic", "t"], 'Option "[topic]" can\'t be used with option "[describe]"'),
    (["--list", "--state", "bogus"], "Invalid state list 'bogus'. Valid states are: PreparingRebalance, "
     "CompletingRebalance, Stable, Dead, Empty, Assigning, Reconciling"),
    (["--list", "--type", "share"], "Invalid types list 'share'. Valid types are: classic, consumer"),
    (["--list", "--members"], "Option [members] can only be used with [describe]"),
    (["--delete"], "Option [delete] takes one of these options: [all-groups], [group]"),
    (["--delete", "--group", "g", "--topic", "t"],
     "The consumer does not support topic-specific offset deletion from a consumer group."),
    (["--delete-offsets", "--group", "g"],
     "Option [delete-offsets] takes the following options: [group] (exactly one), [topic]"),
    (["--delete-offsets", "--group", "g", "--topic", "t:"],
     "Invalid topic arg 't:', expected topic name and partitions"),
    (["--reset-offsets", "--group", "g", "--all-topics"],
     "Option [reset-offsets] requires one of the following scenarios: [to-datetime], [by-duration], "
     "[to-earliest], [to-latest], [shift-by], [from-file], [to-current], [to-offset]"),
    (["--reset-offsets", "--group", "g", "--to-earliest"],
     "One of the reset scopes should be defined: --all-topics, --topic."),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--to-latest", "--all-topics"],
     'Option "[to-earliest]" can\'t be used with option "[to-latest]"'),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--all-topics", "--execute", "--dry-run"],
     "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--all-topics", "--topic", "t"],
     'Option "[all-topics]" can\'t be used with option "[topic]"'),
    (["--reset-offsets", "--group", "g", "--to-datetime", "2024-01-01", "--all-topics"],
     "Invalid datetime '2024-01-01': expected format 'YYYY-MM-DDTHH:mm:SS.sss' with an optional zone "
     "(Z, +hh:mm); no zone means UTC"),
    (["--reset-offsets", "--group", "g", "--by-duration", "1h", "--all-topics"],
     "Invalid duration '1h': expected ISO-8601 format 'PnDTnHnMnS', e.g. PT30M, P1DT12H, PT0.5S"),
    (["--reset-offsets", "--group", "g", "--topic", "t:a", "--to-earliest"],
     "Invalid partition 'a' specified in topic arg 't:a'"),
    (["--reset-offsets", "--group", "g", "--to-offset", "x", "--all-topics"],
     "argument --to-offset: invalid int value: 'x'"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--all-topics", "--export", "--output", "json"],
     'Option "[export]" can\'t be used with option "[output]"'),
    (["--describe", "--group", "g", "--execute"], "Option [execute] can only be used with [reset-offsets]"),
    (["--list", "--timeout", "0"], "Option [timeout] must be a positive number of milliseconds"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUT)
def test_bad_input_is_one_line_and_exit_2(capsys, argv: list[str], message: str) -> None:
    code, out, err = _run(capsys, ["--bootstrap-server", NOWHERE] + argv)
    assert (code, out, err) == (2, "", f"offsetd groups: {message}\n")


def test_missing_bootstrap_server(capsys) -> None:
    assert _run(capsys, ["--list"]) == (2, "", 'offsetd groups: Missing required argument "[bootstrap-server]"\n')


@pytest.mark.parametrize("content, message", [
    ("t,0\n", "Invalid reset plan '{path}' line 1: 't,0' (expected group,topic,partition,offset)"),
    ("t,0,5\nt,x,5\n", "Invalid reset plan '{path}' line 2: 't,x,5' (expected topic,partition,offset)"),
    ("t,0,5\nt,1,five\n", "Invalid reset plan '{path}' line 2: 't,1,five' (expected topic,partition,offset)"),
    ("t,-1,5\n", "Invalid reset plan '{path}' line 1: 't,-1,5' (expected topic,partition,offset)"),
    ("\n\n", "Invalid reset plan '{path}': the file has no lines"),
])
def test_malformed_reset_csv_is_exit_2(capsys, tmp_path, content: str, message: str) -> None:
    path = tmp_path / "plan.csv"
    path.write_text(content)
    code, out, err = _run(capsys, ["--bootstrap-server", NOWHERE, "--group", "g", "--reset-offsets",
                                   "--from-file", str(path), "--execute"])
    assert (code, out, err) == (2, "", "offsetd groups: " + message.format(path=path) + "\n")


def test_three_column_csv_needs_one_group(capsys, tmp_path) -> None:
    path = tmp_path / "plan.csv"
    path.write_text("t,0,5\n")
    code, _, err = _run(capsys, ["--bootstrap-server", NOWHERE, "--group", "a", "--group", "b",
                                 "--reset-offsets", "--from-file", str(path), "--dry-run"])
    assert code == 2
    assert "the topic,partition,offset format needs exactly one --group" in err


def test_missing_files_are_exit_2(capsys, tmp_path) -> None:
    missing = tmp_path / "missing.csv"
    code, _, err = _run(capsys, ["--bootstrap-server", NOWHERE, "--group", "g", "--reset-offsets",
                                 "--from-file", str(missing), "--dry-run"])
    assert (code, err) == (2, f"offsetd groups: Cannot read --from-file '{missing}': No such file or directory\n")
    code, _, err = _run(capsys, ["--bootstrap-server", NOWHERE, "--list", "--command-config", str(missing)])
    assert (code, err) == (2, f"offsetd groups: Cannot read --command-config file '{missing}': "
                              "No such file or directory\n")


def test_unknown_client_property_is_exit_2(capsys, tmp_path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("no.such.key=1\n")
    assert _run(capsys, ["--bootstrap-server", NOWHERE, "--list", "--command-config", str(path)]) == (
        2, "", 'offsetd groups: Invalid client configuration: No such configuration property: "no.such.key"\n')
