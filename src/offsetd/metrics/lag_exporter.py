"""Prometheus families of consumer lag, under the names existing dashboards already query, so a
dashboard built for kafka_exporter or kafka-lag-exporter works when pointed at offsetd.

| family | labels | from |
|---|---|---|
| kafka_consumergroup_current_offset | consumergroup, topic, partition | kafka_exporter |
| kafka_consumergroup_current_offset_sum | consumergroup, topic | kafka_exporter |
| kafka_consumergroup_lag | consumergroup, topic, partition | kafka_exporter |
| kafka_consumergroup_lag_sum | consumergroup, topic | kafka_exporter |
| kafka_consumergroup_members | consumergroup | kafka_exporter |
| kafka_topic_partitions | topic | kafka_exporter |
| kafka_topic_partition_current_offset | topic, partition | kafka_exporter |
| kafka_topic_partition_oldest_offset | topic, partition | kafka_exporter |
| kafka_consumergroup_group_offset | cluster_name, group, topic, partition, member_host, consumer_id, client_id | kafka-lag-exporter |
| kafka_consumergroup_group_lag | (the same) | kafka-lag-exporter |
| kafka_consumergroup_group_lag_seconds | (the same) | kafka-lag-exporter |
| kafka_consumergroup_group_max_lag | cluster_name, group, is_simple_consumer | kafka-lag-exporter |
| kafka_consumergroup_group_max_lag_seconds | cluster_name, group, is_simple_consumer | kafka-lag-exporter |
| kafka_consumergroup_group_sum_lag | cluster_name, group | kafka-lag-exporter |
| kafka_consumergroup_group_topic_sum_lag | cluster_name, group, topic | kafka-lag-exporter |
| kafka_partition_latest_offset | cluster_name, topic, partition | kafka-lag-exporter |
| kafka_partition_earliest_offset | cluster_name, topic, partition | kafka-lag-exporter |
| offsetd_consumergroup_max_lag_seconds | consumergroup | the group's worst time lag |
| offsetd_consumergroup_state | consumergroup, state | 1 for the group's current state |
| offsetd_consumergroup_offsets_expire_seconds | consumergroup | seconds until its first offset expires (KIP-211/496); left out when nothing will |

Where peers go wrong we do not follow (reference peers-and-user-asks.md §3): a partition without a
commit has no series (kafka_exporter writes -1, which pollutes sums); the log end is the last
stable offset (transaction markers are not lag); a commit below the log start counts from it;
time lag is the age of the first unconsumed record from its own timestamp, not interpolated.

The text is written by hand: 2,000 groups x 10 partitions are ~130,000 samples, and a label set
is formatted once per partition and reused by every family that carries it. A group's lines that
do not move with the clock are kept between pages by the group's `revision` (the broker's look
hands out the same revision while a group's rows are unchanged), so a page re-renders the groups
that changed and the time-dependent lines (time lags, expiry countdowns) only.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import add as add_strings
from operator import truediv
from typing import Iterator

from ..lag.model import GroupLag, LagSnapshot, PartitionLag
from .snapshot import Slicer

# (name, help) of each family, in the order they are written.
FAMILIES: dict[str, str] = {
    "kafka_consumergroup_current_offset": "Committed offset of the group for the partition (kafka_exporter).",
    "kafka_consumergroup_current_offset_sum": "Sum of the group's committed offsets over the topic's partitions.",
    "kafka_consumergroup_lag": "Records the group has not consumed: last stable offset minus committed offset.",
    "kafka_consumergroup_lag_sum": "The group's lag summed over the topic's partitions.",
    "kafka_consumergroup_members": "Members of the group.",
    "kafka_topic_partitions": "Partitions of the topic.",
    "kafka_topic_partition_current_offset": "Last stable offset of the partition (its end for read_committed consumers).",
    "kafka_topic_partition_oldest_offset": "Log start offset of the partition.",
    "kafka_consumergroup_group_offset": "Committed offset of the group for the partition (kafka-lag-exporter).",
    "kafka_consumergroup_group_lag": "Lag of the group on the partition in records (kafka-lag-exporter).",
    "kafka_consumergroup_group_lag_seconds": "Age of the first record the group has not consumed, from its own timestamp.",
    "kafka_consumergroup_group_max_lag": "The group's largest lag on one partition, in records.",
    "kafka_consumergroup_group_max_lag_seconds": "The group's largest time lag on one partition, in seconds.",
    "kafka_consumergroup_group_sum_lag": "The group's lag summed over all its partitions.",
    "kafka_consumergroup_group_topic_sum_lag": "The group's lag summed over the topic's partitions.",
    "kafka_partition_latest_offset": "Last stable offset of the partition (kafka-lag-exporter).",
    "kafka_partition_earliest_offset": "Log start offset of the partition (kafka-lag-exporter).",
    "offsetd_consumergroup_max_lag_seconds": "The group's largest time lag on one partition (s).",
    "offsetd_consumergroup_state": "1 for the group's current state (Stable, Empty, PreparingRebalance, ...).",
    "offsetd_consumergroup_offsets_expire_seconds": "Seconds until the group's first offset expires if nothing "
                                                    "changes (KIP-211/496); absent when none will.",
}


# Families whose lines of one group change only with its rows; the rest move with the clock.
_STATIC = ("kafka_consumergroup_current_offset", "kafka_consumergroup_current_offset_sum", "kafka_consumergroup_lag",
           "kafka_consumergroup_lag_sum", "kafka_consumergroup_members", "kafka_consumergroup_group_offset",
           "kafka_consumergroup_group_lag", "kafka_consumergroup_group_max_lag", "kafka_consumergroup_group_sum_lag",
           "kafka_consumergroup_group_topic_sum_lag", "offsetd_consumergroup_state")
_SECONDS_CHUNK = 5000  # time-lag lines formatted between two looks at the clock


@dataclass(slots=True, eq=False)
class _GroupText:
    """One group's part of a page: its lines of each _STATIC family (each line ending in a
    newline), the label prefixes of its partitions, and the prefixes of its clock-bound lines."""

    revision: int | None
    chunks: tuple[bytes, ...]                    # aligned with _STATIC
    labels: dict[str, tuple[str, ...]]           # by "topic\0partition\0host\0consumer\0client" (a string: untracked)
    seconds_at: tuple[int, ...]                  # indexes in partitions of the rows with a commit ...
    seconds: tuple[str, ...]                     # ... and their kafka_consumergroup_group_lag_seconds prefixes
    max_seconds: tuple[str, str]                 # the group's two max-lag-seconds line prefixes
    expire: str                                  # its offsets_expire_seconds line prefix


# The last page's groups, and the cluster label they were written with.
_texts: dict[str, _GroupText] = {}
_texts_cluster = ""


def _escape(value: str) -> str:
    """A label value in the text format: backslash, double quote and newline escaped."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _prefixes(group: str, topic: str, partition: int, cluster: str, p: PartitionLag) -> tuple[str, ...]:
    """The per-partition lines up to their value: kafka_exporter's current offset and lag, then
    kafka-lag-exporter's offset, lag and lag in seconds (group and topic already escaped)."""
    short = f'{{consumergroup="{group}",topic="{topic}",partition="{partition}"}} '
    long = (f'{{cluster_name="{cluster}",group="{group}",topic="{topic}",partition="{partition}",'
            f'member_host="{_escape(p.host or "")}",consumer_id="{_escape(p.consumer_id or "")}",'
            f'client_id="{_escape(p.client_id or "")}"}} ')
    return (f"kafka_consumergroup_current_offset{short}", f"kafka_consumergroup_group_offset{long}",
            f"kafka_consumergroup_lag{short}", f"kafka_consumergroup_group_lag{long}",
            f"kafka_consumergroup_group_lag_seconds{long}")


def _group_text(group: GroupLag, cluster: str, previous: _GroupText | None) -> _GroupText:
    """A group's _GroupText, reusing the label prefixes of its last one."""
    name = _escape(group.group)
    simple = "true" if not group.protocol_type else "false"
    old_labels = previous.labels if previous is not None else {}
    labels: dict[str, tuple[str, ...]] = {}
    seconds_at: list[int] = []
    seconds: list[str] = []
    offsets: list[str] = []                 # "prefix value\n" of the four per-partition families
    group_offsets: list[str] = []
    lags: list[str] = []
    group_lags: list[str] = []
    offset_sums: dict[str, int] = {}
    lag_sums: dict[str, int] = {}
    max_lag = -1
    for index, p in enumerate(group.partitions):
        if p.committed is None:
            continue
        key = f"{p.topic}\0{p.partition}\0{p.host or ''}\0{p.consumer_id or ''}\0{p.client_id or ''}"
        prefixes = old_labels.get(key) or _prefixes(name, _escape(p.topic), p.partition, cluster, p)
        labels[key] = prefixes
        committed = f"{p.committed}\n"
        offsets.append(prefixes[0] + committed)
        group_offsets.append(prefixes[1] + committed)
        offset_sums[p.topic] = offset_sums.get(p.topic, 0) + p.committed
        if p.lag is not None:
            lag = f"{p.lag}\n"
            lags.append(prefixes[2] + lag)
            group_lags.append(prefixes[3] + lag)
            lag_sums[p.topic] = lag_sums.get(p.topic, 0) + p.lag
            if p.lag > max_lag:
                max_lag = p.lag
        seconds_at.append(index)
        seconds.append(prefixes[4])
    by_cluster = f'cluster_name="{cluster}",group="{name}"'
    topic_offsets = "".join(f'kafka_consumergroup_current_offset_sum{{consumergroup="{name}",topic="{_escape(topic)}"}} '
                            f'{total}\n' for topic, total in offset_sums.items())
    topic_lags = topic_sums = ""
    max_line = sum_line = b""
    if lag_sums:
        topic_lags = "".join(f'kafka_consumergroup_lag_sum{{consumergroup="{name}",topic="{_escape(topic)}"}} {total}\n'
                             for topic, total in lag_sums.items())
        topic_sums = "".join(f'kafka_consumergroup_group_topic_sum_lag{{{by_cluster},topic="{_escape(topic)}"}} '
                             f'{total}\n' for topic, total in lag_sums.items())
        max_line = f'kafka_consumergroup_group_max_lag{{{by_cluster},is_simple_consumer="{simple}"}} {max_lag}\n'.encode()
        sum_line = f"kafka_consumergroup_group_sum_lag{{{by_cluster}}} {sum(lag_sums.values())}\n".encode()
    chunks = ("".join(offsets).encode(), topic_offsets.encode(), "".join(lags).encode(), topic_lags.encode(),
              f'kafka_consumergroup_members{{consumergroup="{name}"}} {group.members}\n'.encode(),
              "".join(group_offsets).encode(), "".join(group_lags).encode(), max_line, sum_line, topic_sums.encode(),
              f'offsetd_consumergroup_state{{consumergroup="{name}",state="{group.state}"}} 1\n'.encode())
    return _GroupText(group.revision, chunks, labels, tuple(seconds_at), tuple(seconds),
                      (f'kafka_consumergroup_group_max_lag_seconds{{{by_cluster},is_simple_consumer="{simple}"}} ',
                       f'offsetd_consumergroup_max_lag_seconds{{consumergroup="{name}"}} '),
                      f'offsetd_consumergroup_offsets_expire_seconds{{consumergroup="{name}"}} ')


def render_lag(snapshot: LagSnapshot, out: list[bytes], slicer: Slicer | None = None) -> Iterator[None]:
    """Cooperative generator appending the lag families' exposition text to `out` (it yields when
    a time slice is used up). Each family's lines are gathered first, so the page holds every
    family in one piece, as the text format requires: a group's kept lines of the _STATIC
    families, then the lines that move with the clock, joined by C-level maps."""
    global _texts, _texts_cluster
    slicer = slicer or Slicer()
    cluster = _escape(snapshot.cluster)
    previous = _texts if _texts_cluster == cluster else {}
    texts: dict[str, _GroupText] = {}
    now = snapshot.taken_at_ms
    order: list[_GroupText] = []
    expire: list[str] = []
    max_seconds: list[str] = []
    max_seconds_offsetd: list[str] = []
    time_rows: list[str] = []               # lag-seconds prefixes of partitions with a known time lag ...
    times_ms: list[int] = []                # ... and that time lag
    for group in snapshot.groups:
        text = previous.get(group.group)
        if text is None or group.revision is None or text.revision != group.revision:
            text = _group_text(group, cluster, text)
        texts[group.group] = text
        order.append(text)
        if group.earliest_expiry_ms is not None:
            expire.append(f"{text.expire}{max(0, group.earliest_expiry_ms - now) / 1000}")
        max_ms = -1
        partitions = group.partitions
        for index, prefix in zip(text.seconds_at, text.seconds):
            ms = partitions[index].time_lag_ms
            if ms is not None:
                time_rows.append(prefix)
                times_ms.append(ms)
                if ms > max_ms:
                    max_ms = ms
        if max_ms >= 0:
            max_seconds.append(f"{text.max_seconds[0]}{max_ms / 1000}")
            max_seconds_offsetd.append(f"{text.max_seconds[1]}{max_ms / 1000}")
        if slicer.due():
            yield
    _texts, _texts_cluster = texts, cluster
    seconds: list[str] = []
    for start in range(0, len(time_rows), _SECONDS_CHUNK):  # float formatting: ~0.3 us a line
        seconds += map(add_strings, time_rows[start:start + _SECONDS_CHUNK],
                       map(str, map(truediv, times_ms[start:start + _SECONDS_CHUNK], repeat(1000))))
        if slicer.due():
            yield
    lines: dict[str, list[str]] = {
        "kafka_consumergroup_group_lag_seconds": seconds,
        "kafka_consumergroup_group_max_lag_seconds": max_seconds,
        "offsetd_consumergroup_max_lag_seconds": max_seconds_offsetd,
        "offsetd_consumergroup_offsets_expire_seconds": expire}
    for family in ("kafka_topic_partitions", "kafka_topic_partition_current_offset",
                   "kafka_topic_partition_oldest_offset", "kafka_partition_latest_offset",
                   "kafka_partition_earliest_offset"):
        lines[family] = []

    def add(family: str, labels: str, value: object) -> None:
        lines[family].append(f"{family}{{{labels}}} {value}")

    partitions: dict[str, int] = {}
    for tp in snapshot.partitions:
        topic = _escape(tp.topic)
        partitions[topic] = partitions.get(topic, 0) + 1
        short = f'topic="{topic}",partition="{tp.partition}"'
        long = f'cluster_name="{cluster}",topic="{topic}",partition="{tp.partition}"'
        add("kafka_topic_partition_current_offset", short, tp.log_end)
        add("kafka_topic_partition_oldest_offset", short, tp.log_start)
        add("kafka_partition_latest_offset", long, tp.log_end)
        add("kafka_partition_earliest_offset", long, tp.log_start)
        if slicer.due():
            yield
    for topic, count in partitions.items():
        add("kafka_topic_partitions", f'topic="{topic}"', count)
    static = dict(zip(_STATIC, zip(*(text.chunks for text in order)))) if order else {}
    for name, help_text in FAMILIES.items():
        head = f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"
        if name in _STATIC:  # the groups' kept lines as they are: the page is joined once, by the caller
            out.append(head.encode())
            out.extend(static.get(name, ()))
        else:
            samples = lines[name]
            samples.append("")  # the family's last line ends with a newline too
            out.append((head + "\n".join(samples)).encode())
        if slicer.due():
            yield
