"""Share sessions (KIP-932; reference share-groups.md §3 "Share sessions"): per broker, one per
(group id, member id), the partitions a share consumer fetches and the epoch its next request
must carry. Sans-IO: the shell maps requests to these calls and releases a closed session's
records (broker/share_partition.SharePartition.release_member).

| request epoch | ShareFetch | ShareAcknowledge |
|---|---|---|
| 0 | drop any old session, open a new one (acks: INVALID_REQUEST; cache full: SHARE_SESSION_LIMIT_REACHED) | INVALID_SHARE_SESSION_EPOCH |
| > 0 | the session's epoch (else SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH), partitions added and forgotten | the same epoch check |
| -1 | the session must exist; it closes (fetches nothing) | closes it, no epoch check |

A session's epoch goes 1, 2, ... and after the largest int32 back to 1. A dropped connection
closes the sessions opened on it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Hashable, Iterable

NONE = 0
INVALID_REQUEST = 42
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
SHARE_SESSION_LIMIT_REACHED = 133

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
MAX_EPOCH = 2**31 - 1

TopicIdPartition = tuple[uuid.UUID, int]
SessionKey = tuple[str, str]  # (group id, member id)


@dataclass(slots=True)
class ShareSession:
    """The partitions a member fetches here, and the epoch its next request must carry."""

    group_id: str
    member_id: str
    connection: Hashable
    partitions: set[TopicIdPartition] = field(default_factory=set)
    epoch: int = 1

    def advance(self) -> None:
        self.epoch = 1 if self.epoch == MAX_EPOCH else self.epoch + 1


@dataclass(frozen=True, slots=True)
class SessionAnswer:
    """What a request gets: an error (top-level), or its session; `closed` when the request
    ended the session (the caller releases the member's records after applying its acks)."""

    error: int
    session: ShareSession | None = None
    closed: bool = False


class ShareSessionCache:
    """This broker's share sessions, at most `max_sessions` (group.share.max.share.sessions)."""

    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}
        # connection -> the sessions opened on it: a connection's close touches only its own
        self._by_connection: dict[Hashable, set[SessionKey]] = {}

    def fetch(self, group_id: str, member_id: str, epoch: int, connection: Hashable,
              added: Iterable[TopicIdPartition], forgotten: Iterable[TopicIdPartition], has_acks: bool) -> SessionAnswer:
        """A ShareFetch's session: opened, moved on or closed by its epoch."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if has_acks:
                return SessionAnswer(INVALID_REQUEST)
            self._drop(key)
            if len(self.sessions) >= self.max_sessions:
                return SessionAnswer(SHARE_SESSION_LIMIT_REACHED)
            session = self.sessions[key] = ShareSession(group_id, member_id, connection, set(added))
            self._by_connection.setdefault(connection, set()).add(key)
            return SessionAnswer(NONE, session)
        session = self.sessions.get(key)
        if session is None:
            return SessionAnswer(SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            self._drop(key)
            return SessionAnswer(NONE, session, closed=True)
        if epoch != session.epoch:
            return SessionAnswer(INVALID_SHARE_SESSION_EPOCH)
        session.partitions.update(added)
        session.partitions.difference_update(forgotten)
        session.advance()
        return SessionAnswer(NONE, session)

    def acknowledge(self, group_id: str, member_id: str, epoch: int) -> SessionAnswer:
        """A ShareAcknowledge's session: the same epoch as fetches; -1 closes without a check."""
        if epoch == INITIAL_EPOCH:
            return SessionAnswer(INVALID_SHARE_SESSION_EPOCH)
        key = (group_id, member_id)
        session = self.sessions.get(key)
        if session is None:
            return SessionAnswer(SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            self._drop(key)
            return SessionAnswer(NONE, session, closed=True)
        if epoch != session.epoch:
            return SessionAnswer(INVALID_SHARE_SESSION_EPOCH)
        session.advance()
        return SessionAnswer(NONE, session)

    def connection_closed(self, connection: Hashable) -> list[ShareSession]:
        """The sessions opened on a dropped connection, now closed (release their records)."""
        return [self.sessions.pop(key) for key in self._by_connection.pop(connection, ())]

    def _drop(self, key: SessionKey) -> None:
        """Forget a session and its place in the connection index."""
        session = self.sessions.pop(key, None)
        if session is not None:
            keys = self._by_connection.get(session.connection)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[session.connection]
