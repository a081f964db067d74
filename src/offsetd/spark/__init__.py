"""PySpark Python Data Sources (topic source with group commit-back, offsets-log source) and pipelines.

`register(spark)` makes `format("offsetd")` and `format("offsetd-offsets-log")` available in a
session; the pipelines (`offsetd.spark.pipelines`) and the CLI call it themselves.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Filter pushdown for Python data sources, off by default in pyspark 4.x.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: "SparkSession") -> None:
    """Register both data sources with `spark` (idempotent), and turn on filter pushdown
    (FILTER_PUSHDOWN_CONF) for the session: the offsets-log source's filterPushdown=true reader
    defines pushFilters, and pyspark refuses to plan such a reader while the setting is off
    (DATA_SOURCE_PUSHDOWN_DISABLED) rather than ignoring it. Readers without pushFilters (the
    topic source's, the offsets-log source's default one) are unaffected: Spark applies all
    their filters itself, as with the setting off."""
    from .offsets_log_source import OffsetsLogSource
    from .topic_source import OffsetdTopicSource

    _local_workers_run_this_interpreter(spark)
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(OffsetdTopicSource)
    spark.dataSource.register(OffsetsLogSource)


def _local_workers_run_this_interpreter(spark: "SparkSession") -> None:
    """In local mode, Python workers run the driver's interpreter unless PYSPARK_PYTHON says
    otherwise. pyspark's default is `python3` from PATH, which in a virtualenv that is not
    activated is an interpreter without offsetd ("No module named 'offsetd'" in the workers).
    pyspark reads `SparkContext.pythonExec` each time it wraps a function (a data source, a UDF),
    so setting it before registering is enough. On a real cluster the workers' interpreter is
    the operator's to choose (PYSPARK_PYTHON / spark.pyspark.python); Spark Connect has no
    SparkContext here."""
    if "PYSPARK_PYTHON" in os.environ:
        return
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect: workers are the server's business
        return
    if context.master.startswith("local"):
        context.pythonExec = sys.executable
