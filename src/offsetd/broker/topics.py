"""Topics and their partition logs, with the topic catalogue persisted beside the data.

Kafka keeps topic ids and configs in its metadata log; a single node keeps them in
`<log.dirs>/topics.json`, replaced atomically (write, fsync, rename, fsync dir) on every change,
so a crash leaves either the old or the new catalogue.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ..config import BrokerConfig
from ..storage.clean_shutdown import clear_clean_shutdown, mark_clean_shutdown, was_clean_shutdown
from ..storage.coordinator_journal import journal_paths, read_journals, restore_journaled
from ..storage.durable_file import fsync_dir, write_durably
from ..storage.log_config import LogConfig
from ..storage.log_dir import KAFKA_STORAGE_ERROR, LogDirectory
from ..storage.log_dir_epochs import next_epoch_on_disk, read_next_epochs, remove_next_epochs, write_next_epochs
from ..storage.partition_log import PartitionLog
from ..storage.unopened_log import UnopenedLog
from .topic_config import log_config

log = logging.getLogger("offsetd.broker")

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
CATALOGUE = "topics.json"
META = "meta.properties"


class TopicError(Exception):
    """A topic operation refused with a Kafka error code and message."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def topic_name_problem(name: str) -> str | None:
    """Why a topic name is invalid (Kafka's rules), or None if it is fine."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, topic name: {name}"
    if not _LEGAL.match(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


@dataclass
class Topic:
    """A topic: id, per-topic config overrides and one log per partition."""

    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    partitions: list[PartitionLog] = field(default_factory=list)
    internal: bool = False


class TopicRegistry:
    """All topics of this broker, known from `log.dirs` at start-up. Internal topics' logs are
    opened then (their coordinators load them at once); every other partition is an UnopenedLog
    (storage/unopened_log.py), opened on first use or by the background opener, so the broker
    answers before it has read 100,000 partition directories."""

    marks_clean_shutdown = True
    """Whether close() leaves Kafka's clean-shutdown marker (the local catalogue's logs only)."""

    version = 0
    """Moves whenever a topic is added, removed or grows (what the consumer groups' view of the
    topics, and their resolved regular expressions, are dated by)."""

    def __init__(self, config: BrokerConfig, now_ms: int) -> None:
        self.config = config
        self.root = config.log_dir
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_dir = LogDirectory(self.root)  # health of `log.dirs`, shared by every partition
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self._clean = False  # opening the logs of a clean shutdown (during _load only)
        self._sync_parent = True  # False while a new topic's partitions are made (one fsync for all)
        self.cluster_id = self._load(now_ms)

    def _load(self, now_ms: int) -> str:
        """The topics of `topics.json` (internal ones opened, the rest UnopenedLogs at the epochs
        the clean shutdown recorded, else each partition's checkpoint says); the cluster id
        (meta.properties)."""
        catalogue = self.root / CATALOGUE
        self._clean = was_clean_shutdown(self.root)
        epochs = read_next_epochs(self.root) if self._clean else {}
        journals = journal_paths(self.root)  # the coordinators' appends a power loss may have cut off
        internal: dict[str, PartitionLog] = {}
        if catalogue.exists():
            for entry in json.loads(catalogue.read_text(encoding="utf-8")):
                topic = Topic(entry["name"], uuid.UUID(entry["id"]), dict(entry["configs"]),
                              internal=entry.get("internal", False))
                count = entry["partitions"]
                if topic.internal:  # led once the journal is restored into them (below)
                    topic.partitions = [self._open_log(topic, p, now_ms) for p in range(count)]
                    internal.update((f"{topic.name}-{p}", plog) for p, plog in enumerate(topic.partitions))
                else:
                    known = epochs.get(topic.name)
                    if known is not None and len(known) != count:
                        known = None
                    cfg = log_config(topic.configs, self.config)
                    topic.partitions = [self._unopened(topic, p, cfg, now_ms, self._clean, known[p] if known else
                                                       next_epoch_on_disk(f"{self.root}/{topic.name}-{p}"))
                                        for p in range(count)]
                self._add(topic)
        if journals:
            entries = read_journals(journals)
            restore_journaled(internal, entries, now_ms, self._marked_logs(entries.keys() - internal.keys()))
        for plog in internal.values():
            plog.lead_next_epoch()
        for path in journals:  # what they held is in the fsynced logs now
            path.unlink()
        log.info("%s: %d partition(s) known, opened on first use%s", self.root,
                 sum(len(t.partitions) for t in self._by_name.values()),
                 " (shut down cleanly: none needs recovery)" if self._clean else "")
        self._clean = False
        remove_next_epochs(self.root)
        clear_clean_shutdown(self.root)
        return self._load_meta()

    def _marked_logs(self, names: Iterable[str]) -> dict[str, PartitionLog]:
        """The data partitions among `names` (`<topic>-<partition>`: the journal holds their
        transaction markers), opened for the journal's restore."""
        found: dict[str, PartitionLog] = {}
        for name in names:
            topic_name, _, index = name.rpartition("-")
            topic = self._by_name.get(topic_name)
            if topic is None or topic.internal or not index.isdigit() or int(index) >= len(topic.partitions):
                continue
            plog = topic.partitions[int(index)]
            if not plog.opened:
                plog.open_now()  # type: ignore[attr-defined]
            found[name] = plog
        return found

    def _unopened(self, topic: Topic, index: int, cfg: LogConfig, now_ms: int, clean: bool,
                  epoch: int, empty: bool = False) -> UnopenedLog:
        """Partition `index` of `topic`, opened when first used, leading at `epoch` (or later);
        `empty`: its directory was just made."""
        return UnopenedLog(self.root, topic.name, index, cfg, now_ms, self.log_dir, clean=clean, leader_epoch=epoch,
                           empty=empty)

    def unopened_logs(self) -> list[UnopenedLog]:
        """The partitions not opened yet (the background opener's work list)."""
        return [p for t in self._by_name.values() for p in t.partitions if not p.opened]

    def _open(self, topic: Topic, index: int, now_ms: int) -> Any:
        """The log of one partition of `topic`, led by this broker at its next leader epoch
        (cluster mode: a PostgreSQL-backed one, led when claimed)."""
        plog = self._open_log(topic, index, now_ms)
        plog.lead_next_epoch()
        return plog

    def _open_log(self, topic: Topic, index: int, now_ms: int) -> PartitionLog:
        """The local segment log of one partition of `topic`."""
        return PartitionLog.open(self.root, topic.name, index, log_config(topic.configs, self.config), now_ms,
                                 self.log_dir, clean=self._clean, sync_parent=self._sync_parent)

    def _load_meta(self) -> str:
        """Read or create meta.properties (cluster.id, node.id), as Kafka's log dirs carry."""
        path = self.root / META
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        cluster_id = uuid.uuid4().hex[:22]
        write_durably(path, f"version=1\ncluster.id={cluster_id}\nnode.id={self.config.get('node.id')}\n")
        return cluster_id

    def _add(self, topic: Topic) -> None:
        self.version += 1
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def _save(self) -> None:
        entries = [
            {"name": t.name, "id": str(t.topic_id), "partitions": len(t.partitions),
             "configs": t.configs, "internal": t.internal}
            for t in self._by_name.values()
        ]
        write_durably(self.root / CATALOGUE, json.dumps(entries, indent=1))

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._by_name.values()))

    def get(self, name: str) -> Topic | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID | None) -> Topic | None:
        return self._by_id.get(topic_id) if topic_id is not None else None

    def partition(self, name: str, index: int) -> PartitionLog | None:
        """The log of topic `name` partition `index`, or None if either does not exist."""
        topic = self._by_name.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def create(self, name: str, num_partitions: int, configs: dict[str, str], now_ms: int,
               *, internal: bool = False, validate_only: bool = False) -> Topic:
        """Create a topic; TopicError(36/17/37) if it exists, has a bad name or partition count."""
        self.check_new(name, num_partitions)
        topic = Topic(name, uuid.uuid4(), dict(configs), internal=internal)
        if validate_only:
            return topic
        self._open_range(topic, 0, num_partitions, now_ms, "create topic")
        self._add(topic)
        try:
            self._save()
        except OSError as exc:
            self._remove(topic)
            self._drop_partitions(topic, 0)
            raise self._storage_error(exc, "create topic", name) from exc
        log.info("created topic %s with %d partitions", name, num_partitions)
        return topic

    def _open_range(self, topic: Topic, start: int, end: int, now_ms: int, what: str) -> None:
        """Open partitions [start, end) of `topic` onto its list; on an OSError (EMFILE, ENOSPC,
        ...) remove every one of them again, directories included, and raise TopicError
        KAFKA_STORAGE_ERROR: a topic is created (or grown) whole or not at all."""
        self._sync_parent = False
        cfg = log_config(topic.configs, self.config)
        try:
            for p in range(start, end):
                if topic.internal:
                    topic.partitions.append(self._open(topic, p, now_ms))
                else:  # a directory now; its first segment's files when it is first used
                    try:
                        os.mkdir(f"{self.root}/{topic.name}-{p}")
                    except FileExistsError:  # a directory left behind; its files are found at first use
                        pass
                    topic.partitions.append(self._unopened(topic, p, cfg, now_ms, True, 0, empty=True))
            fsync_dir(self.root)  # every new partition directory, durable before its first append
        except OSError as exc:
            self._drop_partitions(topic, start, failed=len(topic.partitions))
            raise self._storage_error(exc, what, topic.name) from exc
        finally:
            self._sync_parent = True

    def _drop_partitions(self, topic: Topic, start: int, failed: int | None = None) -> None:
        """Delete the logs of `topic`'s partitions from `start` on (and the directory of the
        partition `failed`, which never opened) and forget them."""
        for plog in topic.partitions[start:]:
            plog.delete()
        del topic.partitions[start:]
        if failed is not None:
            shutil.rmtree(self.root / f"{topic.name}-{failed}", ignore_errors=True)
            fsync_dir(self.root)

    @staticmethod
    def _storage_error(exc: OSError, what: str, name: str) -> TopicError:
        """The per-topic answer to a file-system failure (a log directory error, as Kafka names it)."""
        log.error("%s %s failed: %s; nothing of it was kept", what, name, exc)
        return TopicError(KAFKA_STORAGE_ERROR, f"Could not {what} '{name}': {exc.strerror or exc}. "
                                               "Nothing of it was created.")

    def _remove(self, topic: Topic) -> None:
        """Remove `topic` from the registry (its logs are the caller's)."""
        self.version += 1
        del self._by_name[topic.name]
        del self._by_id[topic.topic_id]

    def check_new(self, name: str, num_partitions: int) -> None:
        """TopicError(36/17/37) when a topic of that name and size may not be created."""
        problem = topic_name_problem(name)
        if problem:
            raise TopicError(17, problem)
        if name in self._by_name:
            raise TopicError(36, f"Topic '{name}' already exists.")
        if num_partitions < 1:
            raise TopicError(37, "Number of partitions must be larger than 0.")
        collision = next((t.name for t in self._by_name.values()
                          if t.name.replace(".", "_") == name.replace(".", "_")), None)
        if collision:
            raise TopicError(17, f"Topic '{name}' collides with existing topic: {collision}")

    def check_growth(self, name: str, count: int) -> Topic:
        """The topic, when it may grow to `count` partitions; TopicError(3/37) when not."""
        topic = self._by_name.get(name)
        if topic is None:
            raise TopicError(3, f"The topic '{name}' does not exist.")
        current = len(topic.partitions)
        if count < current:
            raise TopicError(37, f"Topic currently has {current} partitions, which is higher than the requested {count}.")
        if count == current:
            raise TopicError(37, f"Topic already has {current} partitions.")
        return topic

    def add_partitions(self, name: str, count: int, now_ms: int, *, validate_only: bool = False) -> None:
        """Grow a topic to `count` partitions (CreatePartitions)."""
        topic = self.check_growth(name, count)
        current = len(topic.partitions)
        if validate_only:
            return
        self._open_range(topic, current, count, now_ms, "add partitions to")
        self.version += 1
        try:
            self._save()
        except OSError as exc:
            self._drop_partitions(topic, current)
            raise self._storage_error(exc, "add partitions to", name) from exc
        log.info("topic %s now has %d partitions", name, count)

    def delete(self, topic: Topic) -> None:
        """Remove a topic and its data (DeleteTopics)."""
        self._remove(topic)
        try:
            self._save()
        except OSError as exc:
            self._add(topic)
            raise self._storage_error(exc, "delete topic", topic.name) from exc
        for partition in topic.partitions:
            partition.delete()
        log.info("deleted topic %s", topic.name)

    def close(self) -> None:
        """Flush and close every partition log (clean shutdown), then say so on disk when every
        one closed, the log directory is online and no log of a crashed run is still unverified
        (storage/clean_shutdown.py), with the epoch each partition leads at next."""
        unverified = 0
        for topic in self._by_name.values():
            for partition in topic.partitions:
                unverified += partition.needs_recovery
                partition.close()
        if self.log_dir.offline:
            return
        for path in journal_paths(self.root):  # every coordinator segment is fsynced: nothing left to restore
            path.unlink()
        if not self.marks_clean_shutdown:
            return
        if unverified:
            log.warning("%d partition(s) of the crashed run were never opened: the next start verifies "
                        "them (no clean-shutdown marker)", unverified)
            return
        write_next_epochs(self.root, {t.name: [p.next_leader_epoch for p in t.partitions]
                                      for t in self._by_name.values() if not t.internal})
        mark_clean_shutdown(self.root)

