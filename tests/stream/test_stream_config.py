"""`[stream]` and the `stream` command's config errors (no Kafka, no Spark)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from otel_delta.cli import main
from otel_delta.config import Settings, StreamSettings, load_settings
from otel_delta.errors import ConfigError
from otel_delta.stream.job import checkpoint_location
from tests.helpers import wait_until
from tests.stream.test_stream import ROOT, run_stream, stream_command


def test_defaults_are_the_collector_kafka_exporters() -> None:
    stream = StreamSettings()
    assert stream.topics() == {
        "otlp_spans": "traces",
        "otlp_metrics": "metrics",
        "otlp_logs": "logs",
    }
    assert stream.starting_offsets == "earliest" and stream.trigger_interval_seconds == 10
    assert stream.max_offsets_per_trigger is None and stream.kafka_options == {}
    settings = Settings(deltalake={"table_path": "/data/lake"})
    assert checkpoint_location(settings) == "/data/lake/_stream_checkpoints"


def test_empty_topic_is_not_read() -> None:
    assert StreamSettings(metrics_topic="").topics() == {
        "otlp_spans": "traces",
        "otlp_logs": "logs",
    }


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("trigger_interval_seconds = 0", "stream.trigger_interval_seconds"),
        ('starting_offsets = "middle"', "stream.starting_offsets"),
        ("max_offsets_per_trigger = 0", "stream.max_offsets_per_trigger"),
        ('logs_topic = "otlp_spans"', "must differ"),
        ("partitions = 3", "stream.partitions: unknown key"),
        ('admin_endpoint = "localhost"', "stream.admin_endpoint"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, body: str, words: str) -> None:
    config = tmp_path / "deltalake.toml"
    config.write_text(f"[stream]\n{body}\n")
    with pytest.raises(ConfigError, match=words):
        load_settings(config)


def test_stream_without_brokers_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    config = tmp_path / "deltalake.toml"
    config.write_text(f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n')
    assert main(["stream", "--once", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == "otel-delta: config error: stream.bootstrap_servers: required by `otel-delta stream`"
    )


def test_admin_endpoint_in_use_is_one_line_before_spark_starts(tmp_path: Path, capsys) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "deltalake.toml"
        config.write_text(
            f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
            f'[stream]\nbootstrap_servers = "127.0.0.1:9"\nadmin_endpoint = "127.0.0.1:{port}"\n'
        )
        assert main(["stream", "--once", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"otel-delta: config error: stream.admin_endpoint: cannot listen on 127.0.0.1:{port}"
    )
    assert "\n" not in err


@pytest.mark.parametrize(
    ("option", "last_line"),
    [
        # Spark's Kafka source refuses options it manages itself when the query starts; its
        # text begins with a newline, so the line said "stream failed:
        # IllegalArgumentException: " and nothing more, exit 1
        (
            '"auto.offset.reset" = "latest"',
            "stream: the Kafka source refuses its options: "
            "Kafka option 'auto.offset.reset' is not supported.",
        ),
        # librdkafka's spelling `sasl.mechanisms` (the Java client's is `sasl.mechanism`):
        # Kafka logged the unknown key below Spark's log level and connected without it
        (
            '"sasl.mechanisms" = "PLAIN"',
            "stream.kafka_options: sasl.mechanisms is not a setting of the Kafka consumer "
            "(did you mean sasl.mechanism?)",
        ),
    ],
    ids=["managed-by-spark", "misspelt"],
)
def test_a_kafka_option_the_consumer_cannot_take_is_one_config_line(
    tmp_path: Path, option: str, last_line: str
) -> None:
    """Runs `otel-delta stream` as users do (Spark starts; no broker is reached)."""
    config = tmp_path / "deltalake.toml"
    config.write_text(
        f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n[spark]\nmaster = "local[1]"\n'
        '[stream]\nbootstrap_servers = "127.0.0.1:9"\nadmin_endpoint = ""\n'
        f"[stream.kafka_options]\n{option}\n"
    )
    child = run_stream(config)
    assert child.returncode == 2, child.stderr[-3000:]
    assert child.stderr.strip().splitlines()[-1] == f"otel-delta: config error: {last_line}"


def test_sigterm_while_spark_starts_exits_0_with_a_line(tmp_path: Path) -> None:
    """Found by the streaming review: the handlers came after Spark's start, so a SIGTERM
    then (a rollout, Ctrl-C) ended the process with 143 and no line."""
    config = tmp_path / "deltalake.toml"
    config.write_text(
        f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n[spark]\nmaster = "local[1]"\n'
        '[stream]\nbootstrap_servers = "127.0.0.1:9"\nadmin_endpoint = ""\n'
    )
    child = subprocess.Popen(
        stream_command(config),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Spark's JVM is a child of the process while it starts
        wait_until(
            lambda: subprocess.run(["pgrep", "-P", str(child.pid)], capture_output=True).stdout,
            timeout=120,
        )
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=180)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, stderr[-3000:]
    assert "stopped while Spark was starting" in stderr
