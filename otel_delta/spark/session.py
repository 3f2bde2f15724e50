"""The SparkSession, configured for our Delta tables and started without network access.

Delta's jars are fetched once by `make jars` (Maven) into ./jars and passed as `spark.jars`,
so no Spark start resolves anything from a repository.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from otel_delta.config import SparkSettings
from otel_delta.errors import SparkSetupError
from otel_delta.logstores import COMMIT_SAFETY_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_VERSION = "4.0.1"  # pairs with pyspark 4.0.x only
# our put-if-absent commit stores (spark/logstore/pom.xml; otel_delta/logstores.py)
LOGSTORE_JAR = "otel-delta-logstore-0.1.0.jar"
KAFKA_JAR_DIR = "kafka"  # Spark's Kafka source (spark/kafka/pom.xml), for `otel-delta stream`
S3A_JAR_DIR = "s3a"  # hadoop-aws and the AWS SDK (spark/s3a/pom.xml), under the jar directory
DELTA_JARS = (
    f"delta-spark_2.13-{DELTA_VERSION}.jar",
    f"delta-storage-{DELTA_VERSION}.jar",
    LOGSTORE_JAR,
)
DEFAULT_JAR_DIR = Path(__file__).resolve().parents[2] / "jars"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
# Comma-separated lists: what `[spark.conf]` (or `conf`) names is added to ours, each once, so
# a user's jar (hadoop-azure) or extension does not drop Delta's, our log store or S3A.
LIST_CONF = ("spark.jars", "spark.sql.extensions")


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


def session_conf(
    settings: SparkSettings | None = None,
    *,
    derived: Mapping[str, str] | None = None,
    jars: Sequence[Path] = (),
    conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every setting the session starts with (without a JVM: spark_session() applies it).

    Later wins: our defaults, `derived` (the `fs.s3a.*` that Lakehouse derives from the
    storage options), `settings.conf` (the user's `[spark.conf]`), COMMIT_SAFETY_CONF, then
    `conf` (code's own overrides). The LIST_CONF keys are merged instead: Delta's jars, our
    log store's, S3A's and `jars` (the stream's Kafka source), then those each layer names.
    """
    settings = settings or SparkSettings()
    layers = [
        {
            "spark.jars": ",".join(str(p) for p in (*delta_jars(), *jars)),
            "spark.sql.extensions": DELTA_EXTENSION,
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.ui.enabled": str(settings.ui_enabled).lower(),
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "4",
            # features delta-rs cannot write must stay off on tables both engines share
            "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
            "spark.databricks.delta.properties.defaults.enableRowTracking": "false",
            # Parquet TIMESTAMP as INT64 µs (not legacy INT96) so delta-rs reads Spark's files alike
            "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
            # s3:// is S3A too (delta-rs's URLs work as they are)
            "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        },
        dict(derived or {}),
        settings.conf,
        COMMIT_SAFETY_CONF,
        dict(conf or {}),
    ]
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer)
    for key in LIST_CONF:
        items = (item.strip() for layer in layers for item in layer.get(key, "").split(","))
        merged[key] = ",".join(dict.fromkeys(item for item in items if item))
    return merged


def spark_session(
    settings: SparkSettings | None = None,
    *,
    master: str | None = None,
    derived: Mapping[str, str] | None = None,
    jars: Sequence[Path] = (),
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session reading and writing Delta, quiet, UI off by default, bound to 127.0.0.1.

    `settings` is the `[spark]` config section; `master` overrides its `master`; the rest is
    session_conf()'s: `derived` loses to `settings.conf`, `conf` wins over everything (tests
    use it to swap the log store), `jars` are added to Delta's.
    """
    from pyspark.sql import SparkSession

    settings = settings or SparkSettings()
    # Python tasks (the backfill's converters) run on this interpreter, where otel-delta is
    # installed; on a cluster it must exist at the same path on every worker (or set it)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master or settings.master).appName(settings.app_name)
    for key, value in session_conf(settings, derived=derived, jars=jars, conf=conf).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def stopped(session: SparkSession) -> bool:
    """Is this session's Spark gone: its SparkContext stopped (a master that never answered
    gives up on it) or its JVM dead (killed, out of memory)? A session kept in either state
    failed every later commit, for as long as the process ran."""
    try:
        return bool(session.sparkContext._jsc.sc().isStopped())
    except Exception:  # the gateway's own errors: the JVM is not answering
        return True


def forget(session: SparkSession) -> None:
    """Let go of a stopped session so that the next `spark_session` starts Spark again:
    pyspark keeps its context, gateway and session in class attributes, and `getOrCreate`
    would hand back the dead ones. A JVM that still answers is kept (a session of the
    user's may run on it: the next context starts there); a dead one's gateway is closed."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # not session.stop(): its context is stopped already, and stop() clears pyspark's
    # active context and session whatever they are now (a user's new one on this JVM)
    if SparkSession._instantiatedSession is session:
        SparkSession._instantiatedSession = None
    if SparkSession._activeSession is session:
        SparkSession._activeSession = None
    # a context the JVM stopped itself (a master that never answered) is still pyspark's
    # active one, and getOrCreate would build the next session on it
    if SparkContext._active_spark_context is session.sparkContext:
        SparkContext._active_spark_context = None
    gateway = SparkContext._gateway
    if gateway is None or _answers(gateway):
        return
    with contextlib.suppress(Exception):
        gateway.shutdown()
    process = getattr(gateway, "proc", None)
    if process is not None:
        with contextlib.suppress(Exception):
            process.kill()
            process.wait(timeout=10)
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None


def _answers(gateway: Any) -> bool:
    try:
        gateway.jvm.java.lang.System.currentTimeMillis()
    except Exception:  # the gateway's own errors: the JVM is gone
        return False
    return True


def check_can_start() -> None:
    """SparkSetupError, at once, where Spark could never start: Delta's jars missing, or no
    Java. `serve` with Spark as its engine starts Spark at its first commit; without this it
    started, acknowledged data and said it was ready while every commit failed."""
    delta_jars()
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    if java is None or not Path(java).is_file():
        where = f"JAVA_HOME ({java_home})" if java_home else "PATH"
        raise SparkSetupError(f"Spark needs Java 17 or later, and none is on {where}")
