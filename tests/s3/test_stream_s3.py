"""`otel-delta stream --once` into a lake on S3 (versitygw): the executors write the tables'
files through delta-rs's object store, the driver commits them, Spark keeps its streaming
checkpoint beside the tables (s3:// through S3A); a second run adds nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests import corpus
from tests.engines.test_spark import canonical
from tests.kafka import KafkaBroker, kafka_broker
from tests.kafka.test_broker import span_request
from tests.s3 import S3Server, versitygw
from tests.stream.test_stream import expected, produce, run_once, stream_command, topics

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

LAKE = "lake"


@pytest.fixture
def kafka(tmp_path: Path):
    with kafka_broker(tmp_path / "kafka") as broker:
        yield broker


def test_stream_into_a_lake_on_s3(kafka: KafkaBroker, s3: S3Server, tmp_path: Path) -> None:
    names = topics(kafka, "s3", span_partitions=2)
    sent = {
        "traces": [span_request(i) for i in range(20)] + [corpus.trace_request()],
        "logs": [corpus.logs_request()] * 2,
    }
    for signal_name, requests in sent.items():
        produce(kafka, names[signal_name], requests)
    config = tmp_path / "deltalake.toml"
    config.write_text(
        f'[deltalake]\ntable_path = "{s3.url(LAKE)}"\n'
        f"{s3.toml()}"
        '[spark]\nmaster = "local[2]"\n'
        f'[stream]\nbootstrap_servers = "{kafka.bootstrap_servers}"\n'
        f'traces_topic = "{names["traces"]}"\nmetrics_topic = ""\nlogs_topic = "{names["logs"]}"\n'
        'admin_endpoint = ""\nmax_offsets_per_trigger = 10\n'
    )
    run_once(config)

    def stored(name: str) -> DeltaTable:
        return DeltaTable(s3.url(LAKE, name), storage_options=s3.storage_options())

    for name, table in expected(sent).items():
        assert canonical(stored(name).to_pyarrow_table()).equals(canonical(table)), name
    assert s3.objects(LAKE, "_stream_checkpoints")  # Spark's checkpoint, on S3 too
    # every data object in the bucket is a file the log references: none written twice
    for name in expected(sent):
        listed = {
            o for o in s3.objects(LAKE, name) if o.endswith(".parquet") and "_delta_log" not in o
        }
        referenced = {f"{LAKE}/{name}/{p}" for p in stored(name).file_uris()}
        assert {o.split(f"{LAKE}/{name}/", 1)[1] for o in listed} == {
            uri.split(f"/{LAKE}/{name}/", 1)[1] for uri in referenced
        }, name

    versions = {name: stored(name).version() for name in expected(sent)}
    run_once(config)  # nothing new
    assert {name: stored(name).version() for name in expected(sent)} == versions


def test_stream_started_while_s3_is_down_says_so_in_one_line(tmp_path: Path) -> None:
    """The store refusing connections at start: one line naming the lakehouse and the store's
    cause (not delta-rs's "Generic S3 error" alone), exit code 2, before Spark starts and
    before any broker is asked (the broker named here does not exist)."""
    with versitygw(tmp_path / "s3") as s3:  # its own server: the session's is not stopped
        config = tmp_path / "deltalake.toml"
        config.write_text(
            f'[deltalake]\ntable_path = "{s3.url(LAKE)}"\n{s3.toml()}'
            '[stream]\nbootstrap_servers = "127.0.0.1:9"\nadmin_endpoint = ""\n'
        )
        with s3.down():
            child = subprocess.run(
                stream_command(config),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=300,
            )
    assert child.returncode == 2, child.stderr[-3000:]
    lines = child.stderr.strip().splitlines()
    assert len(lines) == 1, child.stderr[-3000:]
    assert lines[0].startswith(
        f"otel-delta: config error: deltalake.table_path: cannot use {s3.url(LAKE)}: "
    )
    assert "Connection refused" in lines[0]
    assert "\x1b[" not in lines[0]
