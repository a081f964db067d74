"""kafka-python's KafkaAdminClient for the calls confluent-kafka's binding lacks (OffsetDelete,
the transaction APIs, DescribeAcls' top-level error), released even when connecting fails:
kafka-python 3.0.12 starts its IO thread before it bootstraps and, when bootstrapping raises,
leaves that thread running and reconnecting for the rest of the process."""

from __future__ import annotations

from typing import Any

from kafka.admin import KafkaAdminClient


class ToolAdminClient(KafkaAdminClient):
    """KafkaAdminClient whose failed constructor stops what it started."""

    def __init__(self, **configs: Any) -> None:
        try:
            super().__init__(**configs)
        except BaseException:
            if hasattr(self, "_net"):  # the IO thread was started: stop it and its connections
                self._client.close()
                self._net.stop()
            raise
