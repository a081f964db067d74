"""Prometheus metrics and the read-only HTTP JSON API of the group coordinator (`metrics.listener`).

* `exporter`: the Prometheus families (Kafka's group-coordinator-metrics names) and their rendering;
* `snapshot`: the read of the shards at request time (cooperative: pauses between time slices);
* `http`: the minimal GET-only HTTP/1.1 server on the broker's event loop.
"""

from .exporter import CoordinatorCollector, exposition
from .http import MetricsHttpServer

__all__ = ["CoordinatorCollector", "MetricsHttpServer", "exposition"]
