"""Spark suite fixtures: ONE local-mode SparkSession for the whole test session (starting a JVM
costs seconds), with both offsetd data sources registered. Brokers come from tests/conftest.py."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest
from pyspark.sql import SparkSession

from offsetd.spark import register


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """local[2], 2 GiB driver, no UI, few shuffle partitions: a shared two-core machine."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("offsetd-tests")
               .config("spark.driver.memory", "2g")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.pollingDelay", "10ms")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    register(session)
    yield session
    session.stop()
