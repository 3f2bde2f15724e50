"""The groundwork of `otel-delta stream` (issue #17): a real Kafka broker (`make kafka`) holding
OTLP messages as the Collector's `kafka` exporter writes them (`encoding: otlp_proto`: each
message one serialized ExportTraceServiceRequest, on topic `otlp_spans`), read back by a Kafka
client and by Spark's Kafka source (`make jars`: jars/kafka/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from tests.kafka import KafkaBroker, Record, kafka_broker, spark_read

pytestmark = pytest.mark.e2e

TOPIC = "otlp_spans"
PARTITIONS = 2
MESSAGES = 100


def span_request(i: int) -> ExportTraceServiceRequest:
    """One request of one span, told apart by `i` (its name and ids)."""
    span = trace_pb2.Span(
        trace_id=(i + 1).to_bytes(16, "big"),
        span_id=(i + 1).to_bytes(8, "big"),
        name=f"span-{i}",
        kind=trace_pb2.Span.SPAN_KIND_SERVER,
        start_time_unix_nano=1_732_000_000_000_000_000 + i,
        end_time_unix_nano=1_732_000_000_000_000_000 + i + 1_000,
    )
    service = KeyValue(key="service.name", value=AnyValue(string_value="checkout"))
    return ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=Resource(attributes=[service]),
                scope_spans=[trace_pb2.ScopeSpans(spans=[span])],
            )
        ]
    )


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kafka")


@pytest.fixture(scope="module")
def kafka(work_dir: Path):
    with kafka_broker(work_dir) as broker:
        yield broker


@pytest.fixture(scope="module")
def sent(kafka: KafkaBroker) -> dict[int, list[bytes]]:
    """`otlp_spans` with two partitions, and the 100 messages produced to it: partition → its
    values in the order sent (even i to partition 0, odd i to partition 1)."""
    kafka.create_topic(TOPIC, partitions=PARTITIONS)
    values = {p: [] for p in range(PARTITIONS)}
    for i in range(MESSAGES):
        values[i % PARTITIONS].append(span_request(i).SerializeToString())
    for partition, batch in values.items():
        assert kafka.produce(TOPIC, batch, partition=partition) == len(batch)
    return values


def span_names(records: list[Record]) -> list[str]:
    names = []
    for record in records:
        request = ExportTraceServiceRequest.FromString(record.value)
        assert len(request.resource_spans) == 1
        (span,) = request.resource_spans[0].scope_spans[0].spans
        names.append(span.name)
    return names


def assert_all_sent(records: list[Record], sent: dict[int, list[bytes]]) -> None:
    """Every message, each where it was sent and in the order sent, nothing else."""
    assert len(records) == MESSAGES
    for partition, values in sent.items():
        mine = [r for r in records if r.partition == partition]
        assert [r.offset for r in mine] == list(range(len(values)))
        assert [r.value for r in mine] == values
    assert sorted(span_names(records)) == sorted(f"span-{i}" for i in range(MESSAGES))


def test_broker_round_trips_otlp_messages(kafka: KafkaBroker, sent) -> None:
    assert kafka.bootstrap_servers.startswith("127.0.0.1:")
    assert kafka.partitions(TOPIC) == [0, 1]
    assert kafka.end_offsets(TOPIC) == {0: 50, 1: 50}
    assert_all_sent(kafka.read(TOPIC), sent)


def test_spark_batch_reads_the_topic(kafka: KafkaBroker, sent, work_dir: Path) -> None:
    """spark.read.format("kafka"), earliest to latest offsets: the same 100 messages, each an
    ExportTraceServiceRequest."""
    records = spark_read(kafka.bootstrap_servers, TOPIC, work_dir)
    assert all(r.key is None for r in records)
    assert_all_sent(records, sent)


def test_cluster_ids_are_never_read_as_options() -> None:
    """One id in 64 would start with '-' if drawn unchecked; the storage tool then refused to
    format and a CI run failed. Every id decodes to 16 bytes, as Kafka requires."""
    import base64

    from tests.kafka import _cluster_id

    ids = [_cluster_id() for _ in range(2_000)]
    assert not [i for i in ids if i.startswith("-")]
    assert {len(base64.urlsafe_b64decode(i + "==")) for i in ids} == {16}
