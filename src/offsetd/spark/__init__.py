"""PySpark Python Data Sources (topic source with group commit-back, offsets-log source) and pipelines.

`register(spark)` makes `format("offsetd")` and `format("offsetd-offsets-log")` available in a
session; the pipelines (`offsetd.spark.pipelines`) and the CLI call it themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: "SparkSession") -> None:
    """Register both data sources with `spark` (idempotent)."""
    from .offsets_log_source import OffsetsLogSource
    from .topic_source import OffsetdTopicSource

    spark.dataSource.register(OffsetdTopicSource)
    spark.dataSource.register(OffsetsLogSource)
