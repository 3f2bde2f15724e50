"""The SparkSession, configured for our Delta tables and started without network access.

Delta's jars are fetched once by `make jars` (Maven) into ./jars and passed as `spark.jars`,
so no Spark start resolves anything from a repository.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from otel_delta.config import SparkSettings
from otel_delta.errors import SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_VERSION = "4.0.1"  # pairs with pyspark 4.0.x only
# our put-if-absent commit store for file:// tables (spark/logstore/pom.xml; README: commit safety)
LOGSTORE_JAR = "otel-delta-logstore-0.1.0.jar"
LOGSTORE_CLASS = "io.oteldelta.storage.LocalPutIfAbsentLogStore"
# ... and for s3:// / s3a:// tables, by S3 conditional PUT, like delta-rs's
S3_LOGSTORE_CLASS = "io.oteldelta.storage.S3PutIfAbsentLogStore"
KAFKA_JAR_DIR = "kafka"  # Spark's Kafka source (spark/kafka/pom.xml), for `otel-delta stream`
S3A_JAR_DIR = "s3a"  # hadoop-aws and the AWS SDK (spark/s3a/pom.xml), under the jar directory
DELTA_JARS = (
    f"delta-spark_2.13-{DELTA_VERSION}.jar",
    f"delta-storage-{DELTA_VERSION}.jar",
    LOGSTORE_JAR,
)
DEFAULT_JAR_DIR = Path(__file__).resolve().parents[2] / "jars"


def delta_jars(jar_dir: Path | None = None) -> list[Path]:
    directory = Path(os.environ.get("OTEL_DELTA_JARS", jar_dir or DEFAULT_JAR_DIR))
    paths = [directory / name for name in DELTA_JARS]
    s3a = sorted((directory / S3A_JAR_DIR).glob("*.jar"))
    missing = [p.name for p in paths if not p.is_file()]
    if not any(p.name.startswith("hadoop-aws-") for p in s3a):
        missing.append(f"{S3A_JAR_DIR}/hadoop-aws-*.jar")
    if missing:
        raise SparkSetupError(
            f"Spark jar(s) {', '.join(missing)} not found in {directory}: run `make jars`"
        )
    return paths + s3a


def kafka_jars(jar_dir: Path | None = None) -> list[Path]:
    """The jars of Spark's Kafka source that `make jars` copies into jars/kafka; only the
    stream's session loads them (passed with Delta's as `spark.jars`)."""
    directory = Path(os.environ.get("OTEL_DELTA_JARS", jar_dir or DEFAULT_JAR_DIR))
    jars = sorted((directory / KAFKA_JAR_DIR).glob("*.jar"))
    if not any(p.name.startswith("spark-sql-kafka-0-10_") for p in jars):
        raise SparkSetupError(
            f"Spark's Kafka source {directory}/{KAFKA_JAR_DIR}/spark-sql-kafka-0-10_*.jar "
            "not found: run `make jars`"
        )
    return jars


def spark_session(
    settings: SparkSettings | None = None,
    *,
    master: str | None = None,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A session reading and writing Delta, quiet, UI off by default, bound to 127.0.0.1.

    `settings` is the `[spark]` config section; `master` overrides its `master`; `conf` is
    applied last, after `settings.conf` (tests use it to swap the log store or add a jar).
    """
    from pyspark.sql import SparkSession

    settings = settings or SparkSettings()
    # Python tasks (the backfill's converters) run on this interpreter, where otel-delta is
    # installed; on a cluster it must exist at the same path on every worker (or set it)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = ",".join(str(p) for p in delta_jars())
    builder = (
        SparkSession.builder.master(master or settings.master)
        .appName(settings.app_name)
        .config("spark.jars", jars)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.ui.enabled", str(settings.ui_enabled).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        # features delta-rs cannot write must stay off on tables both engines share
        .config("spark.databricks.delta.properties.defaults.enableDeletionVectors", "false")
        .config("spark.databricks.delta.properties.defaults.enableRowTracking", "false")
        # Parquet TIMESTAMP as INT64 µs (not legacy INT96) so delta-rs reads Spark's files alike
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        # commits to local tables are put-if-absent, like delta-rs's, so neither engine can
        # replace the other's commit (the default store's check-then-rename can)
        .config("spark.delta.logStore.file.impl", LOGSTORE_CLASS)
        # s3:// is S3A too (delta-rs's URLs work as they are), with put-if-absent commits
        .config("spark.hadoop.fs.s3.impl", "org.apache.hadoop.fs.s3a.S3AFileSystem")
        .config("spark.delta.logStore.s3.impl", S3_LOGSTORE_CLASS)
        .config("spark.delta.logStore.s3a.impl", S3_LOGSTORE_CLASS)
    )
    for key, value in {**settings.conf, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
