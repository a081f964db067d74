"""Errors of the operator tools and Kafka's texts for the protocol errors they print.

`UsageError` is bad input (exit status 2, nothing was changed); `ToolError` is a failure talking
to the cluster or a refusal (exit status 1). Kafka error codes are the same numbers whichever
client library reported them, so one table gives Kafka's own wording for both."""

from __future__ import annotations

import argparse
from typing import NoReturn


class UsageError(Exception):
    """Malformed or conflicting options: one line to stderr, exit status 2."""


class ToolError(Exception):
    """The cluster refused or failed an operation: exit status 1."""


# code -> (Kafka's error name, Kafka's error message) for the errors these tools can meet.
KAFKA_ERRORS: dict[int, tuple[str, str]] = {
    3: ("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition."),
    7: ("REQUEST_TIMED_OUT", "The request timed out."),
    14: ("COORDINATOR_LOAD_IN_PROGRESS", "The coordinator is loading and hence can't process requests."),
    15: ("COORDINATOR_NOT_AVAILABLE", "The coordinator is not available."),
    16: ("NOT_COORDINATOR", "This is not the correct coordinator."),
    24: ("INVALID_GROUP_ID", "The configured groupId is invalid."),
    25: ("UNKNOWN_MEMBER_ID", "The coordinator is not aware of this member."),
    27: ("REBALANCE_IN_PROGRESS", "The group is rebalancing, so a rejoin is needed."),
    29: ("TOPIC_AUTHORIZATION_FAILED", "Topic authorization failed."),
    30: ("GROUP_AUTHORIZATION_FAILED", "Group authorization failed."),
    68: ("NON_EMPTY_GROUP", "The group is not empty."),
    69: ("GROUP_ID_NOT_FOUND", "The group id does not exist."),
    86: ("GROUP_SUBSCRIBED_TO_TOPIC",
         "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."),
}


def kafka_error_text(code: int, fallback: str) -> str:
    """Kafka's message for error `code`, or `fallback` (the client's text) for other codes."""
    known = KAFKA_ERRORS.get(code)
    return known[1] if known else fallback


def kafka_error_name(code: int, fallback: str) -> str:
    """Kafka's name for error `code` (e.g. NON_EMPTY_GROUP), or `fallback`."""
    known = KAFKA_ERRORS.get(code)
    return known[0] if known else fallback


class ToolParser(argparse.ArgumentParser):
    """argparse that reports errors as UsageError (one line, exit 2) instead of usage text: the
    parser of every `offsetd` tool."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)
