"""Transaction coordinator settings, with Kafka's property names and defaults (reference A8)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Kafka's transaction coordinator configs (milliseconds unless named otherwise)."""

    transaction_max_timeout_ms: int = 900_000
    """`transaction.max.timeout.ms`: larger InitProducerId timeouts get INVALID_TRANSACTION_TIMEOUT."""
    transactional_id_expiration_ms: int = 604_800_000
    """`transactional.id.expiration.ms`: idle Empty/Complete* ids are then tombstoned."""
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    """`transaction.abort.timed.out.transaction.cleanup.interval.ms`."""
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    """`transaction.remove.expired.transaction.cleanup.interval.ms`."""
    transaction_state_log_num_partitions: int = 50
    """`transaction.state.log.num.partitions`."""

    PROPERTY_NAMES = {
        "transaction.max.timeout.ms": "transaction_max_timeout_ms",
        "transactional.id.expiration.ms": "transactional_id_expiration_ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms":
            "abort_timed_out_transaction_cleanup_interval_ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms":
            "remove_expired_transaction_cleanup_interval_ms",
        "transaction.state.log.num.partitions": "transaction_state_log_num_partitions",
    }

    @classmethod
    def from_properties(cls, props: dict[str, str | int | None]) -> "TransactionConfig":
        """Build from Kafka property names (other names are ignored; None keeps the default)."""
        kwargs = {attr: int(value) for name, attr in cls.PROPERTY_NAMES.items()
                  if (value := props.get(name)) is not None}
        return cls(**kwargs)
