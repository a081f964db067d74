"""`--topic` arguments of kafka-consumer-groups: `topic` (every partition of the topic) or
`topic:0,1,2` (those partitions). Parsing is pure; expanding a bare topic needs the cluster."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import UsageError

# Kafka's legal topic names: ASCII letters, digits, '.', '_' and '-', at most 249 characters.
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(frozen=True)
class TopicArg:
    """One parsed `--topic`: `partitions` is None for a bare topic (all of its partitions)."""

    topic: str
    partitions: tuple[int, ...] | None


def parse_topic_arg(arg: str) -> TopicArg:
    """Parse `t` or `t:0,1`; raise UsageError with Kafka's wording on malformed input."""
    topic, sep, partition_list = arg.partition(":")
    if not sep:
        _check_topic_name(topic, arg)
        return TopicArg(topic, None)
    if not topic or not partition_list or ":" in partition_list:
        raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    _check_topic_name(topic, arg)
    partitions: list[int] = []
    for item in partition_list.split(","):
        if not item.isdigit():
            raise UsageError(f"Invalid partition '{item}' specified in topic arg '{arg}'")
        partitions.append(int(item))
    return TopicArg(topic, tuple(dict.fromkeys(partitions)))


def _check_topic_name(topic: str, arg: str) -> None:
    """Reject names Kafka could never have created (empty, illegal characters, too long)."""
    if not _TOPIC_NAME.fullmatch(topic):
        raise UsageError(f"Invalid topic arg '{arg}': '{topic}' is not a legal topic name "
                         "(ASCII letters, digits, '.', '_', '-'; at most 249 characters)")
