import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from otel_delta.config import load_settings
from otel_delta.convert import spans_to_arrow
from otel_delta.errors import ConfigError, SparkSetupError
from otel_delta.lakehouse import Lakehouse
from otel_delta.logstores import COMMIT_SAFETY_CONF, LOGSTORE_CLASS, S3_LOGSTORE_CLASS
from otel_delta.signals import SIGNALS_BY_NAME
from otel_delta.spark.session import DELTA_EXTENSION, LOGSTORE_JAR, delta_jars, kafka_jars
from tests import corpus
from tests.backfill.collector import write_json_lines
from tests.test_cli import one_span_request


def test_missing_jars_name_the_command_that_fetches_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_DELTA_JARS", str(tmp_path))
    with pytest.raises(SparkSetupError) as err:
        delta_jars()
    message = str(err.value)
    assert "delta-spark_2.13-4.0.1.jar" in message and "make jars" in message
    assert "\n" not in message


def test_logstore_jar_name_matches_the_maven_build() -> None:
    """session.py and the Makefile name the jar spark/logstore/pom.xml builds."""
    import re

    root = Path(__file__).resolve().parents[2]
    pom = (root / "spark" / "logstore" / "pom.xml").read_text()
    artifact = re.search(r"<artifactId>(otel-delta-logstore)</artifactId>", pom)[1]
    version = re.search(r"<artifactId>otel-delta-logstore</artifactId>\s*<version>([^<]+)<", pom)[1]
    assert f"{artifact}-{version}.jar" == LOGSTORE_JAR
    assert f"jars/{LOGSTORE_JAR}" in (root / "Makefile").read_text()
    source = root / "spark/logstore/src/main/java" / (LOGSTORE_CLASS.replace(".", "/") + ".java")
    assert source.is_file()


USER_JAR = "/opt/jars/hadoop-azure-3.4.1.jar"


def lakehouse_of(tmp_path: Path, toml: str) -> Lakehouse:
    """The lakehouse a bridge started with this deltalake.toml would use."""
    config = tmp_path / "deltalake.toml"
    config.write_text(toml)
    return Lakehouse.from_settings(load_settings(config))


def test_a_jar_in_spark_conf_is_added_to_deltas_and_ours(tmp_path: Path) -> None:
    """README (Azure/GCS on Spark): a user adds hadoop-azure as `spark.jars` in [spark.conf].
    Spark must still start with Delta, our log store and S3A; so must the stream's session,
    which adds the Kafka source's jars too. An extension of the user's joins Delta's."""
    lakehouse = lakehouse_of(
        tmp_path,
        f'[spark.conf]\n"spark.jars" = "{USER_JAR}"\n'
        '"spark.sql.extensions" = "org.example.UserExtension"\n',
    )
    ours = [str(p) for p in delta_jars()]
    assert any(LOGSTORE_JAR in jar for jar in ours)

    conf = lakehouse.spark_conf()
    assert conf["spark.jars"].split(",") == [*ours, USER_JAR]
    assert conf["spark.sql.extensions"] == f"{DELTA_EXTENSION},org.example.UserExtension"

    stream = lakehouse.spark_conf(jars=kafka_jars())
    assert stream["spark.jars"].split(",") == [*ours, *map(str, kafka_jars()), USER_JAR]


def test_spark_conf_wins_over_what_storage_options_derive(tmp_path: Path) -> None:
    """An S3-compatible endpoint in storage.options makes S3A path-style by default; a user
    whose store wants virtual-hosted requests says so in [spark.conf], and that must win.
    What the user does not set is still derived."""
    lakehouse = lakehouse_of(
        tmp_path,
        '[deltalake]\ntable_path = "s3://bucket/lake"\n'
        '[deltalake.storage.options]\nAWS_ENDPOINT_URL = "http://127.0.0.1:9000"\n'
        '[spark.conf]\n"spark.hadoop.fs.s3a.path.style.access" = "false"\n',
    )
    conf = lakehouse.spark_conf()
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"


def test_spark_conf_cannot_swap_the_log_stores_that_keep_commits_safe(tmp_path: Path) -> None:
    """Spark's own S3 store checks, then PUTs: it can replace a delta-rs commit. Naming it in
    [spark.conf] stops the bridge at load with one line; naming ours is accepted."""
    with pytest.raises(ConfigError) as err:
        lakehouse_of(
            tmp_path,
            '[spark.conf]\n"spark.delta.logStore.s3.impl" = '
            '"io.delta.storage.S3SingleDriverLogStore"\n',
        )
    message = str(err.value)
    assert "spark.delta.logStore.s3.impl" in message and S3_LOGSTORE_CLASS in message
    assert "\n" not in message
    # Delta's one key for every scheme: it fails Spark's first Delta access beside ours
    with pytest.raises(ConfigError, match=r"spark\.delta\.logStore\.class cannot be set"):
        lakehouse_of(
            tmp_path,
            '[spark.conf]\n"spark.delta.logStore.class" = "io.delta.storage.HDFSLogStore"\n',
        )

    same = lakehouse_of(
        tmp_path, f'[spark.conf]\n"spark.delta.logStore.file.impl" = "{LOGSTORE_CLASS}"\n'
    )
    conf = same.spark_conf()
    assert {key: conf[key] for key in COMMIT_SAFETY_CONF} == COMMIT_SAFETY_CONF


@pytest.mark.e2e
def test_spark_with_a_users_jar_still_writes_delta(tmp_path: Path) -> None:
    """The user's run: `otel-delta backfill` on Spark with a jar of their own in [spark.conf]
    (here the Kafka source's commons-pool2, which the default session does not load). Spark
    must start with Delta too and commit the rows; with the user's jar in place of Delta's it
    failed on the `delta` format."""
    user_jar = next(p for p in kafka_jars() if p.name.startswith("commons-pool2-"))
    files = write_json_lines(tmp_path / "logs.json", [corpus.logs_request()])
    lake = tmp_path / "lake"
    config = tmp_path / "deltalake.toml"
    config.write_text(
        f'[deltalake]\ntable_path = "{lake}"\n[deltalake.operations]\nengine = "spark"\n'
        f'[spark]\nmaster = "local[1]"\n[spark.conf]\n"spark.jars" = "{user_jar}"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "backfill", "--config", str(config), str(files)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 file(s) loaded with spark" in done.stdout, done.stdout
    rows = SIGNALS_BY_NAME["logs"].convert(corpus.logs_request()).tables["logs"].num_rows
    assert DeltaTable(str(lake / "logs")).count() == rows


AFTER_SPARK_DIES = """
import os, signal, sys
from pyspark import SparkContext
from otel_delta.config import SparkSettings
from otel_delta.convert import spans_to_arrow
from otel_delta.engines import SparkEngine
from otel_delta.lakehouse import Lakehouse
from tests.test_cli import one_span_request

engine = SparkEngine(Lakehouse(sys.argv[1], spark=SparkSettings(master="local[1]")))
rows = lambda i: spans_to_arrow(one_span_request(i)).tables["spans"]
engine.append("spans", rows(1))
java = SparkContext._gateway.proc
os.kill(java.pid, signal.SIGKILL)  # the JVM killed (out of memory, an operator)
java.wait()
engine.append("spans", rows(2))
engine.session.sparkContext._jsc.sc().stop()  # the JVM stops it (a master never answered)
engine.append("spans", rows(3))
# a user of the same process (Connector.spark() hands out this one session) stops it and
# starts another on the same JVM: the engine takes that one, and leaves it running
engine.session.stop()
user = engine.lakehouse.spark_session()
engine.append("spans", rows(4))
assert user.range(3).count() == 3, "the user's session was stopped"
"""


@pytest.mark.e2e
def test_an_engine_whose_spark_died_starts_it_again(tmp_path: Path) -> None:
    """Found by the Spark review: once its JVM was killed or its context stopped, the
    engine kept the dead session, and every commit failed ("Connection refused", "Cannot
    call methods on a stopped SparkContext") until the bridge was restarted."""
    done = subprocess.run(
        [sys.executable, "-c", AFTER_SPARK_DIES, str(tmp_path / "lake")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Spark stopped under the bridge" in done.stderr
    spans = DeltaTable(str(tmp_path / "lake" / "spans")).to_pyarrow_table()
    assert sorted(spans.column("name").to_pylist()) == sorted(
        spans_to_arrow(one_span_request(i)).tables["spans"].column("name")[0].as_py()
        for i in (1, 2, 3, 4)
    )


@pytest.mark.parametrize(
    "environment",
    [{"OTEL_DELTA_JARS": "{empty}"}, {"PATH": "{empty}", "JAVA_HOME": ""}],
    ids=["no-jars", "no-java"],
)
def test_serve_on_spark_that_cannot_start_stops_with_one_line(
    tmp_path: Path, environment: dict[str, str]
) -> None:
    """Found by the Spark review: `serve` with `engine = "spark"` started, acknowledged data
    and said it was ready, while every commit failed (no jars, no Java)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    config = tmp_path / "deltalake.toml"
    config.write_text(
        '[receiver]\ngrpc_endpoint = "127.0.0.1:0"\nhttp_endpoint = "127.0.0.1:0"\n'
        f'[admin]\nendpoint = ""\n[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        f'[deltalake.operations]\nengine = "spark"\n[wal]\ndir = "{tmp_path / "wal"}"\n'
    )
    env = {**os.environ, **{k: v.format(empty=empty) for k, v in environment.items()}}
    if not env.get("JAVA_HOME", "x"):
        del env["JAVA_HOME"]
    done = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert "make jars" in line or "Java" in line, line
