"""The options `offsetd groups` and `offsetd share-groups` share, with the names and help of
Kafka's kafka-consumer-groups / kafka-share-groups: the connection, the five actions, which groups
and topics, and the describe views both tools have."""

from __future__ import annotations

import argparse

ACTIONS = ("list", "describe", "delete", "reset-offsets", "delete-offsets")


def add_shared_options(p: argparse.ArgumentParser, *, group: str, all_groups: str, actions: dict[str, str],
                       all_topics: str, offsets: str) -> None:
    """Add the shared options to a tool's parser; the strings are its own help texts (`actions`
    maps each of ACTIONS to one)."""
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE", help="properties file with client configs (security etc.)")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS", help="timeout of each request (default 5000)")
    for action in ACTIONS:
        p.add_argument(f"--{action}", action="store_true", help=actions[action])
    p.add_argument("--group", action="append", default=[], help=f"{group} to act on (repeatable)")
    p.add_argument("--all-groups", action="store_true", help=f"apply to all {all_groups}")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]",
                   help="topic, or topic:0,1 for some partitions (reset-offsets, delete-offsets; repeatable)")
    p.add_argument("--all-topics", action="store_true", help=all_topics)
    p.add_argument("--offsets", action="store_true", help=offsets)
    p.add_argument("--members", action="store_true", help="describe: members")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                   help="describe: group state; list: show states, optionally filtered (e.g. stable,empty)")
