"""`otel-delta stream --once` on a real Spark standalone cluster (a master and one worker on
127.0.0.1, from pyspark's own launch classes): the driver ships the Delta and Kafka jars, the
worker's executor reads the topics and runs the receiver's converters, and the tables are what
the receiver would store."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_delta.spark.standalone import spark_env, standalone_cluster
from tests import corpus
from tests.kafka import KafkaBroker, kafka_broker
from tests.kafka.test_broker import span_request
from tests.stream.test_stream import assert_stored, produce, run_once, topics, write_config

pytestmark = pytest.mark.e2e

APP = "otel-delta-stream-cluster-test"


@pytest.fixture
def kafka(tmp_path: Path):
    with kafka_broker(tmp_path / "kafka") as broker:
        yield broker


def test_stream_on_a_standalone_cluster(kafka: KafkaBroker, tmp_path: Path) -> None:
    names = topics(kafka, "cluster", span_partitions=2)
    sent = {
        "traces": [span_request(i) for i in range(30)] + [corpus.trace_request()],
        "metrics": [corpus.metrics_request()],
        "logs": [corpus.logs_request()] * 2,
    }
    for signal_name, requests in sent.items():
        produce(kafka, names[signal_name], requests)
    with standalone_cluster(tmp_path) as cluster:
        spark = (
            f'master = "{cluster.url}"\napp_name = "{APP}"\n'
            '[spark.conf]\n"spark.executor.memory" = "512m"\n"spark.cores.max" = "1"'
        )
        config = write_config(tmp_path, kafka, names, spark=spark, max_offsets_per_trigger=12)
        child = run_once(config, env=spark_env())
        # the job ran as an application of this cluster, so on its worker's executor
        assert APP in cluster.application_names()
    assert_stored(tmp_path, sent)
    assert child.stderr.count("progress of batch") >= 3  # 34 messages, at most 12 a batch
