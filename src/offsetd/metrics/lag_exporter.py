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
is formatted once per partition and reused by every family that carries it.
"""

from __future__ import annotations

from itertools import repeat
from operator import add as add_strings
from operator import itemgetter, truediv
from typing import Iterator

from ..lag.model import LagSnapshot, PartitionLag
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


# The label sets of the last page, by (group, topic, partition, member host, consumer id, client id):
# between two scrapes few change, and formatting them is most of a page's cost.
_LabelCache = dict[tuple[str, str, int, "str | None", "str | None", "str | None"], tuple[str, ...]]
_labels: _LabelCache = {}
_labels_cluster = ""


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


def render_lag(snapshot: LagSnapshot, out: list[bytes], slicer: Slicer | None = None) -> Iterator[None]:
    """Cooperative generator appending the lag families' exposition text to `out` (it yields when
    a time slice is used up). Each family's lines are gathered first, so the page holds every
    family in one piece, as the text format requires. The per-partition lines are joined at the
    end by C-level maps (label prefix + value), which is most of a large page."""
    global _labels, _labels_cluster
    slicer = slicer or Slicer()
    lines: dict[str, list[str]] = {name: [] for name in FAMILIES}

    def add(family: str, labels: str, value: object) -> None:
        lines[family].append(f"{family}{{{labels}}} {value}")

    cluster = _escape(snapshot.cluster)
    previous = _labels if _labels_cluster == cluster else {}
    labels: _LabelCache = {}
    now = snapshot.taken_at_ms
    rows: list[tuple[str, ...]] = []        # label prefixes of every committed partition ...
    offsets: list[int] = []                 # ... and its committed offset
    lag_rows: list[tuple[str, ...]] = []    # the same for partitions with a known lag
    lags: list[int] = []
    time_rows: list[tuple[str, ...]] = []   # and with a known time lag
    times_ms: list[int] = []
    for group in snapshot.groups:
        name = _escape(group.group)
        simple = "true" if not group.protocol_type else "false"
        add("kafka_consumergroup_members", f'consumergroup="{name}"', group.members)
        add("offsetd_consumergroup_state", f'consumergroup="{name}",state="{group.state}"', 1)
        if group.earliest_expiry_ms is not None:
            add("offsetd_consumergroup_offsets_expire_seconds", f'consumergroup="{name}"',
                max(0, group.earliest_expiry_ms - now) / 1000)
        offset_sums: dict[str, int] = {}
        lag_sums: dict[str, int] = {}
        max_lag = max_ms = -1
        for p in group.partitions:
            if p.committed is None:
                continue
            key = (group.group, p.topic, p.partition, p.host, p.consumer_id, p.client_id)
            prefixes = previous.get(key) or _prefixes(name, _escape(p.topic), p.partition, cluster, p)
            labels[key] = prefixes
            rows.append(prefixes)
            offsets.append(p.committed)
            offset_sums[p.topic] = offset_sums.get(p.topic, 0) + p.committed
            if p.lag is not None:
                lag_rows.append(prefixes)
                lags.append(p.lag)
                lag_sums[p.topic] = lag_sums.get(p.topic, 0) + p.lag
                max_lag = max(max_lag, p.lag)
            if p.time_lag_ms is not None:
                time_rows.append(prefixes)
                times_ms.append(p.time_lag_ms)
                max_ms = max(max_ms, p.time_lag_ms)
        for topic, total in offset_sums.items():
            add("kafka_consumergroup_current_offset_sum", f'consumergroup="{name}",topic="{_escape(topic)}"', total)
        for topic, total in lag_sums.items():
            add("kafka_consumergroup_lag_sum", f'consumergroup="{name}",topic="{_escape(topic)}"', total)
            add("kafka_consumergroup_group_topic_sum_lag", f'cluster_name="{cluster}",group="{name}",'
                f'topic="{_escape(topic)}"', total)
        if lag_sums:
            add("kafka_consumergroup_group_sum_lag", f'cluster_name="{cluster}",group="{name}"', sum(lag_sums.values()))
            add("kafka_consumergroup_group_max_lag", f'cluster_name="{cluster}",group="{name}",'
                f'is_simple_consumer="{simple}"', max_lag)
        if max_ms >= 0:
            add("kafka_consumergroup_group_max_lag_seconds", f'cluster_name="{cluster}",group="{name}",'
                f'is_simple_consumer="{simple}"', max_ms / 1000)
            add("offsetd_consumergroup_max_lag_seconds", f'consumergroup="{name}"', max_ms / 1000)
        if slicer.due():
            yield
    _labels, _labels_cluster = labels, cluster
    offset_text = list(map(str, offsets))
    lag_text = list(map(str, lags))
    seconds_text = list(map(str, map(truediv, times_ms, repeat(1000))))
    for family, index, prefixed, values in (
            ("kafka_consumergroup_current_offset", 0, rows, offset_text),
            ("kafka_consumergroup_group_offset", 1, rows, offset_text),
            ("kafka_consumergroup_lag", 2, lag_rows, lag_text),
            ("kafka_consumergroup_group_lag", 3, lag_rows, lag_text),
            ("kafka_consumergroup_group_lag_seconds", 4, time_rows, seconds_text)):
        lines[family] = list(map(add_strings, map(itemgetter(index), prefixed), values))
        if slicer.due():
            yield
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
    for topic, count in partitions.items():
        add("kafka_topic_partitions", f'topic="{topic}"', count)
    for name, help_text in FAMILIES.items():
        samples = lines[name]
        samples.append("")  # the family's last line ends with a newline too
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n{chr(10).join(samples)}".encode())
        if slicer.due():
            yield
