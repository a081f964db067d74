"""Transactional offsets on the sans-IO GroupCoordinatorShard: TxnOffsetCommit (KOC §1.2,
reference A5), pending offsets and markers (§5.4, A10), require_stable (§1.3), expiration (§2),
OffsetDelete / DeleteGroups (§1.4, §1.5), and loading a log that holds them (§5.1).

`TxnHarness` is the shell: every result is appended to an in-memory `__consumer_offsets` log
(real record batches with real offsets; a transactional result is one transactional batch of its
producer, a marker a control batch) and replayed with those offsets, so a test can also load
the very bytes into a fresh shard through the loader's scanner and compare.
"""

from __future__ import annotations

from typing import Any, Hashable

import pytest

from coordinator_helpers import (
    COMPLETING_CONSUMER, COORDINATOR_NOT_AVAILABLE, DEAD_GROUP, EMPTY, EMPTY_CONSUMER, EMPTY_SIMPLE,
    FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INVALID_GROUP_ID, MISSING, NONE, OFFSET_METADATA_TOO_LARGE,
    PREPARING_CONSUMER, STABLE_CONSUMER, SUBSCRIBED, UNKNOWN_MEMBER_ID,
    GroupInfo, Harness, build_group, form_group, make_config, resolve, stabilize, decoded,
)
from offsetd.coordinator.result import CoordinatorResult
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.records.batch import TRANSACTIONAL_MASK, build_batch, patch_base_offset
from offsetd.records.control import build_marker_batch
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, encode_key, encode_value
from offsetd.records.scan import scan_key_values

UNSTABLE_OFFSET_COMMIT = 88  # §0
RETENTION = 7 * 24 * 3600 * 1000  # offsets.retention.minutes default, ms (§2)
G = "g"
PID, PID2 = 1000, 2000


class TxnHarness(Harness):
    """Harness whose results go to a byte log with offsets (see the module docstring)."""

    raw: bytearray
    next_offset: int

    @classmethod
    def new(cls, **config: Any) -> "TxnHarness":
        h = cls(GroupCoordinatorShard(0, make_config(**config)))
        h.raw, h.next_offset = bytearray(), 0
        return h

    def _append(self, batch: bytes, count: int) -> int:
        base = self.next_offset
        data = bytearray(batch)
        patch_base_offset(data, 0, base)
        self.raw += data
        self.next_offset += count
        return base

    def run(self, result: CoordinatorResult) -> dict[Hashable, Any]:
        self.log.extend(decoded(result.records))
        encoded = [(k, v) if isinstance(k, bytes) else (encode_key(k), None if v is None else encode_value(v))
                   for k, v in result.records]
        if encoded:
            pid = result.producer_id
            txn = dict(producer_id=pid, producer_epoch=result.producer_epoch, base_sequence=-1,
                       attributes=TRANSACTIONAL_MASK) if pid >= 0 else {}
            base = self._append(build_batch([(k, v, self.now, []) for k, v in encoded], **txn), len(encoded))
            if result.replay:
                for i, (k, v) in enumerate(encoded):
                    if pid >= 0:
                        self.shard.replay_transactional(pid, k, v, base + i)
                    else:
                        self.shard.replay_raw(k, v)
        return {token: resolve(response) for token, response in result.completions}

    def marker(self, producer_id: int, commit: bool) -> None:
        self._append(build_marker_batch(producer_id, 0, commit, 3, self.now), 1)
        self.shard.replay_marker(producer_id, commit)

    def txn_commit(self, group_id: str | None, producer_id: int, offsets: list[tuple[str, int, int]], *,
                   member_id: str = "", instance_id: str | None = None, generation: int = -1,
                   metadata: str | None = None) -> tuple[dict[tuple[str, int], int], CoordinatorResult]:
        token = self.token("txn-commit")
        result = self.shard.txn_offset_commit(
            token, group_id, member_id, instance_id, generation,
            [(t, p, o, -1, metadata) for t, p, o in offsets], producer_id, 0, self.now)
        return self.run(result)[token], result

    def plain(self, group_id: str, offsets: list[tuple[str, int, int]]) -> None:
        errors, _, _ = self.commit(group_id, [(t, p, o, -1, None) for t, p, o in offsets])
        assert set(errors.values()) == {NONE}

    def stable(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> list:
        """require_stable rows as (topic, [(partition, offset, error)])."""
        return [(t, [(p, o, err) for p, o, _, _, err in rows])
                for t, rows in self.shard.fetch_stable_offsets(group_id, topics)]

    def loaded(self) -> GroupCoordinatorShard:
        """A fresh shard loaded from the byte log the way the runtime's loader does (§5.1)."""
        shard = GroupCoordinatorShard(0, make_config())
        seen, consumed = scan_key_values(bytes(self.raw), shard.table.replay, shard.replay_batch)
        assert consumed == len(self.raw)
        return shard


def snapshot(shard: GroupCoordinatorShard) -> dict:
    """Everything a client could observe about the shard's offsets and transactions."""
    return {"groups": sorted(g for g, _, _ in shard.list_groups()),
            "offsets": {g: shard.fetch_offsets(g, None) for g, _, _ in shard.list_groups()},
            "stable": {g: shard.fetch_stable_offsets(g, None) for g, _, _ in shard.list_groups()},
            "open": sorted(g for g, _, _ in shard.list_groups() if shard.has_open_transaction(g)),
            "producers": shard.txn.producers()}


# ------------------------------------------------------------------------------------------
# pending offsets and markers (§5.4)


def test_pending_offset_is_invisible_until_commit_marker_promotes_it():
    h = TxnHarness.new()
    h.plain(G, [("t", 0, 5)])
    errors, result = h.txn_commit(G, PID, [("t", 0, 10), ("t", 1, 11)])
    assert errors == {("t", 0): NONE, ("t", 1): NONE}
    assert (result.producer_id, result.producer_epoch) == (PID, 0)
    assert h.offset(G, "t", 0) == 5 and h.offset(G, "t", 1) == -1  # §1.3: previous value until the marker
    assert h.stable(G, [("t", [0, 1, 2])]) == [("t", [(0, -1, 88), (1, -1, 88), (2, -1, NONE)])]
    assert h.shard.has_open_transaction(G) and h.shard.pending_partitions(G) == [("t", 0), ("t", 1)]
    h.marker(PID, commit=True)
    assert h.offset(G, "t", 0) == 10 and h.offset(G, "t", 1) == 11
    assert h.stable(G, [("t", [0, 1])]) == [("t", [(0, 10, NONE), (1, 11, NONE)])]
    assert not h.shard.has_open_transaction(G) and h.shard.txn.producers() == {}


def test_abort_marker_drops_pending_offsets():
    h = TxnHarness.new()
    h.plain(G, [("t", 0, 5)])
    h.txn_commit(G, PID, [("t", 0, 10), ("t", 1, 11)])
    h.marker(PID, commit=False)
    assert (h.offset(G, "t", 0), h.offset(G, "t", 1)) == (5, -1)
    assert h.stable(G, None) == [("t", [(0, 5, NONE)])]
    assert not h.shard.has_open_transaction(G)


def test_marker_of_a_producer_with_nothing_pending_changes_nothing():
    h = TxnHarness.new()
    h.txn_commit(G, PID, [("t", 0, 10)])
    h.marker(PID2, commit=True)
    assert h.offset(G, "t", 0) == -1 and h.shard.has_open_transaction(G)
    h.marker(PID, commit=True)
    h.marker(PID, commit=False)  # a resent marker: no-op
    assert h.offset(G, "t", 0) == 10


def test_plain_commit_written_after_the_pending_one_wins_at_commit():
    """§5.4: COMMIT promotes only if the pending record's log offset is greater than the
    committed value's: a plain commit that came later in the log keeps its value."""
    h = TxnHarness.new()
    h.txn_commit(G, PID, [("t", 0, 10), ("t", 1, 11)])
    h.plain(G, [("t", 0, 20)])
    h.marker(PID, commit=True)
    assert (h.offset(G, "t", 0), h.offset(G, "t", 1)) == (20, 11)


def test_pending_offset_written_after_a_plain_commit_wins_at_commit():
    h = TxnHarness.new()
    h.plain(G, [("t", 0, 20)])
    h.txn_commit(G, PID, [("t", 0, 10)])
    h.marker(PID, commit=True)
    assert h.offset(G, "t", 0) == 10


@pytest.mark.parametrize("first_marker", [PID, PID2])
def test_two_producers_on_one_partition_the_later_record_wins(first_marker):
    """PID writes at a lower log offset than PID2; whichever commits first, PID2's value stays."""
    h = TxnHarness.new()
    h.txn_commit(G, PID, [("t", 0, 10)])
    h.txn_commit(G, PID2, [("t", 0, 20)])
    second = PID2 if first_marker == PID else PID
    h.marker(first_marker, commit=True)
    assert h.offset(G, "t", 0) == (10 if first_marker == PID else 20)
    assert h.stable(G, [("t", [0])]) == [("t", [(0, -1, UNSTABLE_OFFSET_COMMIT)])]  # the other is open
    h.marker(second, commit=True)
    assert h.offset(G, "t", 0) == 20
    assert h.stable(G, [("t", [0])]) == [("t", [(0, 20, NONE)])]


def test_plain_commit_between_two_pending_ones_of_one_partition():
    """PID at offset a, plain at b, PID2 at c (a < b < c): PID loses to the plain commit, PID2 wins."""
    h = TxnHarness.new()
    h.txn_commit(G, PID, [("t", 0, 10)])
    h.plain(G, [("t", 0, 15)])
    h.txn_commit(G, PID2, [("t", 0, 20)])
    h.marker(PID, commit=True)
    assert h.offset(G, "t", 0) == 15
    h.marker(PID2, commit=True)
    assert h.offset(G, "t", 0) == 20


def test_tombstone_clears_pending_offsets_of_its_partition():
    """§5.4: OffsetDelete writes a tombstone even when only a pending offset exists; replaying
    it drops the pending offset, so the later COMMIT promotes nothing there."""
    h = TxnHarness.new()
    h.txn_commit(G, PID, [("t", 0, 10), ("t", 1, 11)])
    answer, result = h.delete_offsets(G, [("t", [0])])
    assert answer["error_code"] == NONE and result.records == [(OffsetCommitKey(G, "t", 0), None)]
    assert h.shard.pending_partitions(G) == [("t", 1)]
    h.marker(PID, commit=True)
    assert (h.offset(G, "t", 0), h.offset(G, "t", 1)) == (-1, 11)


def test_delete_groups_writes_one_tombstone_per_committed_or_pending_only_partition():
    """§1.5: committed offsets' tombstones, then one for each pending-only partition, then the
    group tombstone; the group and its pending offsets are gone."""
    h = TxnHarness.new()
    h.plain(G, [("t", 0, 5)])
    h.txn_commit(G, PID, [("t", 0, 10), ("t", 1, 11)])
    errors, result = h.delete_groups([G])
    assert errors == {G: NONE}
    assert result.records == [(OffsetCommitKey(G, "t", 0), None), (OffsetCommitKey(G, "t", 1), None),
                              (GroupMetadataKey(G), None)]
    assert G not in [g for g, _, _ in h.shard.list_groups()] and not h.shard.has_open_transaction(G)
    h.marker(PID, commit=True)
    assert G not in [g for g, _, _ in h.shard.list_groups()]


def test_pending_offset_creates_an_offsets_only_group():
    h = TxnHarness.new()
    h.txn_commit("fresh", PID, [("t", 0, 10)])
    assert h.state("fresh") == EMPTY and h.shard.fetch_offsets("fresh", None) == []
    assert h.stable("fresh", None) == [("t", [(0, -1, UNSTABLE_OFFSET_COMMIT)])]


def test_partition_deletion_tombstones_pending_offsets_too():
    h = TxnHarness.new()
    h.txn_commit(G, PID, [("doomed", 0, 10)])
    result = h.shard.on_partitions_deleted("doomed", [0])
    assert result.records == [(OffsetCommitKey(G, "doomed", 0), None)]
    h.run(result)
    h.marker(PID, commit=True)
    assert h.offset(G, "doomed", 0) == -1


# ------------------------------------------------------------------------------------------
# expiration (§2)


def test_expiration_skips_pending_partitions_and_keeps_a_group_with_an_open_transaction():
    h = TxnHarness.new()
    h.plain(G, [("t", 0, 5), ("t", 1, 6)])  # a simple group: each offset by its own commit time
    h.txn_commit(G, PID, [("t", 1, 60), ("t", 2, 70)])
    h.now += RETENTION
    result = h.shard.expire_offsets(h.now, [G])
    assert result.records == [(OffsetCommitKey(G, "t", 0), None)]  # t-1 has a pending offset: kept
    h.run(result)
    assert h.shard.expiry_times(G) == {("t", 1): None}
    h.marker(PID, commit=False)
    h.now += 1
    result = h.shard.expire_offsets(h.now, [G])
    assert [k for k, _ in result.records][0] == OffsetCommitKey(G, "t", 1)
    assert len(result.records) == 2  # and, nothing left nor open, the group tombstone
    h.run(result)
    assert G not in [g for g, _, _ in h.shard.list_groups()]


def test_expiration_never_deletes_an_empty_group_whose_only_offsets_are_pending():
    h = TxnHarness.new()
    h.txn_commit(G, PID, [("t", 0, 10)])
    h.now += 10 * RETENTION
    assert h.shard.expire_offsets(h.now, [G]).records == []
    h.marker(PID, commit=False)
    result = h.shard.expire_offsets(h.now, [G])
    assert len(result.records) == 1  # the group tombstone: no offsets, no open transaction


# ------------------------------------------------------------------------------------------
# TxnOffsetCommit validation (§1.2, A5: KIP-447 for classic groups)

OK = NONE
COLUMNS = ('gen<0, member "", no instance id', "gen<0, existing member id", "gen=G (current), valid member",
           "gen!=G, valid member", "unknown member")

# §1.1's matrix with §1.2's differences: a missing group with generation >= 0 is 22 in every
# version; no "no member info in a non-empty group -> 25" rule; no CompletingRebalance -> 27.
TXN_COMMIT_MATRIX: dict[str, tuple[int, ...]] = {
    MISSING:             (OK, OK, ILLEGAL_GENERATION, ILLEGAL_GENERATION, ILLEGAL_GENERATION),
    EMPTY_SIMPLE:        (OK, OK, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID),
    EMPTY_CONSUMER:      (OK, OK, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID),
    PREPARING_CONSUMER:  (OK, ILLEGAL_GENERATION, OK, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID),
    COMPLETING_CONSUMER: (OK, ILLEGAL_GENERATION, OK, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID),
    STABLE_CONSUMER:     (OK, ILLEGAL_GENERATION, OK, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID),
    DEAD_GROUP:          (COORDINATOR_NOT_AVAILABLE,) * 5,
}


def _request(info: GroupInfo, column: int, exists: bool) -> tuple[str, int]:
    generation = info.generation if exists else 10
    member = info.some_member
    return [("", -1), (member, -1), (member, generation), (member, generation + 1),
            ("unknown-member", generation)][column]


@pytest.mark.parametrize("situation,column", [
    pytest.param(s, c, id=f"{s} | {COLUMNS[c]}") for s in TXN_COMMIT_MATRIX for c in range(len(COLUMNS))])
def test_txn_offset_commit_result_matrix(situation, column):
    h = TxnHarness.new()
    info = build_group(h, G, situation)
    member_id, generation = _request(info, column, exists=situation != MISSING)
    expected = TXN_COMMIT_MATRIX[situation][column]
    errors, result = h.txn_commit(G, PID, [(SUBSCRIBED, 0, 100), (SUBSCRIBED, 1, 101)],
                                  member_id=member_id, generation=generation)
    assert errors == {(SUBSCRIBED, 0): expected, (SUBSCRIBED, 1): expected}
    if expected == NONE:
        assert [k for k, _ in result.records] == [OffsetCommitKey(G, SUBSCRIBED, 0), OffsetCommitKey(G, SUBSCRIBED, 1)]
        assert all(v.expire_timestamp == -1 and v.commit_timestamp == h.now for _, v in result.records)
        assert h.shard.pending_partitions(G) == [(SUBSCRIBED, 0), (SUBSCRIBED, 1)]
    else:
        assert result.records == [] and not h.shard.has_open_transaction(G)


@pytest.mark.parametrize("group_id", [None, ""])
def test_txn_offset_commit_rejects_null_and_empty_group_id(group_id):
    h = TxnHarness.new()
    errors, result = h.txn_commit(group_id, PID, [("t", 0, 1)])
    assert errors == {("t", 0): INVALID_GROUP_ID} and result.records == []


@pytest.mark.parametrize("instance,who,expected", [
    ("i-0", "own", NONE),                    # the static member with its own id
    ("i-0", "other", FENCED_INSTANCE_ID),    # instance id mapped to another member id
    ("nobody", "own", UNKNOWN_MEMBER_ID),    # instance id not mapped to any member
])
def test_txn_offset_commit_static_member_checks(instance, who, expected):
    h = TxnHarness.new()
    info = form_group(h, G, ["i-0", None])
    stabilize(h, info)
    static = next(m for m, i in info.instance_ids.items() if i == "i-0")
    member = static if who == "own" else next(m for m in info.members if m != static)
    errors, _ = h.txn_commit(G, PID, [(SUBSCRIBED, 0, 1)], member_id=member, instance_id=instance,
                             generation=info.generation)
    assert errors == {(SUBSCRIBED, 0): expected}


def test_txn_offset_commit_metadata_too_large_is_per_partition():
    h = TxnHarness.new(metadata_max_bytes=4)
    token = h.token("txn")
    result = h.shard.txn_offset_commit(token, G, "", None, -1, [("t", 0, 1, -1, "12345"), ("t", 1, 2, -1, "1234")],
                                       PID, 0, h.now)
    assert h.run(result)[token] == {("t", 0): OFFSET_METADATA_TOO_LARGE, ("t", 1): NONE}
    assert [k for k, _ in result.records] == [OffsetCommitKey(G, "t", 1)]


# ------------------------------------------------------------------------------------------
# loading (§5.1): the same log, loaded, gives the same state as the live replay


def test_loading_a_log_with_transactional_batches_and_markers_gives_the_live_state():
    h = TxnHarness.new()
    info = build_group(h, "members", STABLE_CONSUMER)
    h.plain(G, [("t", 0, 1), ("t", 1, 1)])
    h.txn_commit(G, PID, [("t", 0, 10), ("t", 2, 12)])        # committed later, loses t-0 to the plain 20
    h.plain(G, [("t", 0, 20)])
    h.txn_commit("other", PID2, [("u", 0, 7)])                 # aborted
    h.txn_commit("members", PID + 1, [(SUBSCRIBED, 0, 99)], member_id=info.leader, generation=info.generation)
    h.marker(PID, commit=True)
    h.marker(PID2, commit=False)
    h.txn_commit(G, PID2, [("t", 1, 30)])                      # still open at the end of the log
    h.marker(4242, commit=True)                                # unknown producer: no-op
    live = snapshot(h.shard)
    assert live["offsets"][G] == [("t", [(0, 20, -1, ""), (1, 1, -1, ""), (2, 12, -1, "")])]
    assert live["open"] == [G, "members"] and live["producers"] == {PID + 1: 1, PID2: 1}
    assert snapshot(h.loaded()) == live


def test_loader_scan_hands_only_transactional_and_control_batches_to_on_batch():
    h = TxnHarness.new()
    h.plain(G, [("t", 0, 1)])
    h.txn_commit(G, PID, [("t", 0, 2), ("t", 1, 3)])
    h.marker(PID, commit=True)
    plain: list = []
    batches: list = []
    seen, consumed = scan_key_values(bytes(h.raw), lambda k, v: plain.append(k), lambda b: batches.append(bytes(b)))
    assert (seen, consumed) == (4, len(h.raw)) and len(plain) == 1
    assert [len(b) for b in batches] and len(batches) == 2
    assert scan_key_values(bytes(h.raw), lambda k, v: None) == (1, len(h.raw))  # without on_batch: skipped


# ------------------------------------------------------------------------------------------
# random histories against a model of §5.4: the committed value of a partition is the record
# latest in the log among plain commits and transactional ones whose producer's next marker is
# COMMIT (already written), counting only records after the partition's last tombstone


@pytest.mark.parametrize("seed", range(25))
def test_random_histories_match_the_log_order_model_live_and_loaded(seed):
    import random

    rng = random.Random(seed)
    h = TxnHarness.new()
    producers = [PID, PID2, PID + 7]
    # (offset, kind, producer, group, partition, value); kind: plain | txn | tombstone | marker
    history: list[tuple[int, str, int, str, int, Any]] = []
    for _ in range(rng.randint(5, 60)):
        group, partition, value = rng.choice([G, "h"]), rng.randint(0, 2), rng.randint(0, 10**6)
        roll = rng.random()
        offset = h.next_offset
        if roll < 0.3:
            h.plain(group, [("t", partition, value)])
            history.append((offset, "plain", -1, group, partition, value))
        elif roll < 0.65:
            pid = rng.choice(producers)
            h.txn_commit(group, pid, [("t", partition, value)])
            history.append((offset, "txn", pid, group, partition, value))
        elif roll < 0.75:
            _, result = h.delete_offsets(group, [("t", [partition])])
            if result.records:
                history.append((offset, "tombstone", -1, group, partition, None))
        else:
            pid, commit = rng.choice(producers), rng.random() < 0.6
            h.marker(pid, commit)
            history.append((offset, "marker", pid, "", 0, commit))

    def model() -> dict[tuple[str, int], int]:
        best: dict[tuple[str, int], tuple[int, int]] = {}
        for i, (offset, kind, pid, group, partition, value) in enumerate(history):
            tp = (group, partition)
            if kind == "tombstone":
                best.pop(tp, None)
            elif kind == "plain":
                best[tp] = (offset, value)
            elif kind == "marker":
                # promote this producer's records since its previous marker, unless tombstoned since
                start = max([o for o, k, p, *_ in history[:i] if k == "marker" and p == pid], default=-1)
                for o, k, p, g, part, v in history[:i]:
                    if k == "txn" and p == pid and o > start and value:
                        dead = any(k2 == "tombstone" and (g2, p2) == (g, part) and o2 > o
                                   for o2, k2, _, g2, p2, _ in history[:i])
                        if not dead and o > best.get((g, part), (-1, 0))[0]:
                            best[(g, part)] = (o, v)
        return {tp: v for tp, (_, v) in best.items()}

    def observed(shard: GroupCoordinatorShard) -> dict[tuple[str, int], int]:
        return {(g, p): o for g in (G, "h") for _, rows in shard.fetch_offsets(g, None) for p, o, _, _ in rows}

    assert observed(h.shard) == model()
    assert snapshot(h.loaded()) == snapshot(h.shard)


def test_compiled_and_interpreted_scans_hand_over_the_same_batches():
    """records/scan.py is compiled (setup.py): its on_batch path must behave as the source does."""
    import importlib.util

    import offsetd.records.scan as compiled

    spec = importlib.util.spec_from_file_location("scan_interpreted", compiled.__file__.rsplit("/", 1)[0] + "/scan.py")
    interpreted = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(interpreted)
    h = TxnHarness.new()
    h.plain(G, [("t", 0, 1), ("t", 1, 2)])
    h.txn_commit(G, PID, [("t", 0, 3)])
    h.marker(PID, commit=False)
    h.plain(G, [("t", 2, 4)])

    def collect(module) -> tuple:
        records: list = []
        batches: list = []
        counts = module.scan_key_values(bytes(h.raw), lambda k, v: records.append((k, v)),
                                        lambda b: batches.append(bytes(b)))
        return counts, records, batches

    assert collect(compiled) == collect(interpreted)
    (seen, _), records, batches = collect(compiled)
    assert (seen, len(records), len(batches)) == (5, 3, 2)
