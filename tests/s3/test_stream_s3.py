"""`otel-delta stream --once` into a lake on S3 (versitygw): the executors write the tables'
files through delta-rs's object store, the driver commits them, Spark keeps its streaming
checkpoint beside the tables (s3:// through S3A); a second run adds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests import corpus
from tests.engines.test_spark import canonical
from tests.kafka import KafkaBroker, kafka_broker
from tests.kafka.test_broker import span_request
from tests.s3 import S3Server
from tests.stream.test_stream import expected, produce, run_once, topics

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
