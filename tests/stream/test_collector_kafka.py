"""The streaming path as users deploy it: telemetrygen → the OpenTelemetry Collector, whose
pipelines fan out to its contrib `kafka` exporter (`encoding: otlp_proto`, or `otlp_json`;
traces keyed by trace id over two partitions) and to the bridge over OTLP/gRPC →
`otel-delta stream --once` from the broker into a second lake. The two lakes hold the same rows:
the stream and the receiver convert alike, and the exporter's messages are what the stream
reads. The Collector is built by
`make collector-kafka` (tools/otelcol-kafka/builder.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_delta.tables.schemas import DEAD_LETTER_TABLE
from tests.collector.test_collector import EXPECTED, feed_through_collector, sorted_rows
from tests.helpers import LOOPBACK, ServeProcess, free_port, read_table, table_exists
from tests.kafka import KafkaBroker, kafka_broker
from tests.stream.test_stream import run_once, topics, write_config
from tests.tools import otelcol_kafka_binary

pytestmark = pytest.mark.e2e


@pytest.fixture
def kafka(tmp_path: Path):
    with kafka_broker(tmp_path / "kafka") as broker:
        yield broker


def collector_config(
    tmp_path: Path,
    kafka: KafkaBroker,
    names: dict[str, str],
    bridge: ServeProcess,
    encoding: str = "otlp_proto",
) -> tuple[Path, dict[str, int]]:
    ports = {"grpc": free_port(), "health": free_port()}
    per_signal = "".join(
        f"    {signal}: {{topic: {topic}, encoding: {encoding}}}\n"
        for signal, topic in names.items()
    )
    pipelines = "".join(
        f"    {signal}:\n      receivers: [otlp]\n      processors: [batch]\n"
        "      exporters: [kafka, otlp_grpc/bridge]\n"
        for signal in names
    )
    config = tmp_path / "otelcol.yaml"
    config.write_text(
        f"extensions:\n  health_check: {{endpoint: 127.0.0.1:{ports['health']}}}\n"
        "receivers:\n  otlp:\n    protocols:\n"
        f"      grpc: {{endpoint: 127.0.0.1:{ports['grpc']}}}\n"
        "processors:\n  batch: {send_batch_size: 200, timeout: 200ms}\n"
        "exporters:\n"
        f"  kafka:\n    brokers: [{kafka.bootstrap_servers}]\n"
        "    partition_traces_by_id: true\n"
        f"{per_signal}"
        f"  otlp_grpc/bridge:\n    endpoint: 127.0.0.1:{bridge.port}\n    tls: {{insecure: true}}\n"
        "service:\n  extensions: [health_check]\n"
        "  telemetry: {metrics: {level: none}, logs: {level: warn}}\n"
        f"  pipelines:\n{pipelines}"
    )
    return config, ports


# otlp_json: every message went to the dead letters ("not an OTLP protobuf ...")
@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_collector_kafka_exporter_to_stream_stores_what_the_bridge_stores(
    kafka: KafkaBroker, tmp_path: Path, encoding: str
) -> None:
    names = topics(kafka, "otelcol", span_partitions=2)
    bridge_lake = tmp_path / "bridge-lake"
    bridge_config = tmp_path / "bridge.toml"
    bridge_config.write_text(
        f"{LOOPBACK}[buffer]\nflush_interval_seconds = 0.5\n"
        f'[deltalake]\ntable_path = "{bridge_lake}"\n[wal]\ndir = "{tmp_path / "wal"}"\n'
    )
    bridge = ServeProcess(bridge_config)
    try:
        config, ports = collector_config(tmp_path, kafka, names, bridge, encoding)
        feed_through_collector(otelcol_kafka_binary(), config, ports, bridge_lake)
    finally:
        assert bridge.stop() == 0, "".join(bridge.lines[-20:])

    # the exporter's messages, keyed by trace id over two partitions, reached the broker
    assert kafka.end_offsets(names["traces"]) and all(kafka.end_offsets(names["traces"]).values())
    stream_config = write_config(tmp_path, kafka, names)
    run_once(stream_config)
    stream_lake = tmp_path / "lake"
    for table, expected in EXPECTED.items():
        streamed = read_table(stream_lake, table)
        assert streamed.num_rows == expected, table  # none lost, none twice
        assert sorted_rows(streamed) == sorted_rows(read_table(bridge_lake, table)), table
    assert not table_exists(stream_lake, DEAD_LETTER_TABLE)
