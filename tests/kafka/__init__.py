"""Apache Kafka for the tests of the Kafka source (`otel-delta stream`, issue #17): a real broker,
and Spark's reader of it.

`kafka_broker(directory)` runs one Kafka process (`make kafka`) that is both broker and controller
(KRaft mode, no ZooKeeper) on free loopback ports, its storage formatted under `directory`, and
stops it when the block ends. The object it yields creates topics, produces messages and reads
them back with confluent-kafka (librdkafka, the client of most non-JVM Kafka users):

    with kafka_broker(tmp_path) as kafka:
        kafka.create_topic("otlp_spans", partitions=2)
        kafka.produce("otlp_spans", [request.SerializeToString()])
        records = kafka.read("otlp_spans")  # all of them, by partition and offset

`spark_read(...)` reads a topic with Spark's Kafka source (`make jars` puts it in jars/kafka/) as
a batch, in a child process: Spark takes `spark.jars` only when its JVM starts, and a test process
may already run one (tests/conftest.py's session-wide `spark` fixture) without these jars.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import free_port, wait_until
from tests.tools import ROOT, kafka_libs

START_TIMEOUT = 90.0  # a JVM start on a busy 2-core machine; ~4 s when idle
STOP_TIMEOUT = 20.0  # a controlled shutdown takes ~2 s; then SIGKILL
HEAP = "-Xmx512m"
NODE_ID = 1
# librdkafka's own log lines go to Python logging (pytest shows them with a failure), not stderr
CLIENT_LOG = logging.getLogger("tests.kafka.client")


@dataclass(frozen=True)
class Record:
    """One message of a topic, as read back."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes


class KafkaBroker:
    """A running single-node Kafka: where it answers, its log, and client helpers."""

    def __init__(self, bootstrap_servers: str, log: Path) -> None:
        self.bootstrap_servers = bootstrap_servers  # 127.0.0.1:PORT
        self.log = log  # the broker's stdout and stderr

    def client_config(self, **extra: object) -> dict[str, object]:
        return {"bootstrap.servers": self.bootstrap_servers, "logger": CLIENT_LOG, **extra}

    def admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.client_config())

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 30.0) -> None:
        """A topic with `partitions` partitions (replication factor 1), returned once every
        partition has its leader."""
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1)
        admin.create_topics([topic], operation_timeout=timeout)[name].result(timeout)

        def led() -> bool:
            found = admin.list_topics(name, timeout=timeout).topics.get(name)
            return (
                found is not None
                and found.error is None
                and len(found.partitions) == partitions
                and all(p.leader == NODE_ID for p in found.partitions.values())
            )

        wait_until(led, timeout, f"the leaders of topic {name}")

    def partitions(self, topic: str, timeout: float = 30.0) -> list[int]:
        found = self.admin().list_topics(topic, timeout=timeout).topics[topic]
        if found.error is not None:
            raise RuntimeError(f"topic {topic}: {found.error}")
        return sorted(found.partitions)

    def produce(
        self,
        topic: str,
        values: Iterable[bytes],
        *,
        partition: int | None = None,
        key: bytes | None = None,
        timeout: float = 60.0,
    ) -> int:
        """Each value as a message (to `partition`, or where the client's partitioner puts it),
        acknowledged by the broker (acks=all) before this returns; how many were sent."""
        from confluent_kafka import Producer

        producer = Producer(self.client_config(**{"acks": "all", "enable.idempotence": True}))
        failures: list[str] = []

        def delivered(error, message) -> None:
            if error is not None:
                failures.append(f"partition {message.partition()}: {error}")

        sent = 0
        where = {} if partition is None else {"partition": partition}
        for value in values:
            producer.produce(topic, value=value, key=key, on_delivery=delivered, **where)
            producer.poll(0)  # serves delivery reports, so the local queue never fills
            sent += 1
        unsent = producer.flush(timeout)
        if unsent or failures:
            raise RuntimeError(f"{unsent} message(s) not delivered in {timeout} s; {failures[:5]}")
        return sent

    def end_offsets(self, topic: str, timeout: float = 30.0) -> dict[int, int]:
        """partition → the offset the next message will get (its high watermark)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self.client_config(**{"group.id": f"end-{uuid.uuid4().hex}"}))
        try:
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1]
                for p in self.partitions(topic, timeout)
            }
        finally:
            consumer.close()

    def read(self, topic: str, timeout: float = 60.0) -> list[Record]:
        """Every message of `topic` (up to its end offsets when called), by partition and
        offset; read without a consumer group's offsets (nothing is committed)."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        ends = self.end_offsets(topic, timeout)
        pending = {p for p, end in ends.items() if end > 0}
        consumer = Consumer(
            self.client_config(
                **{"group.id": f"read-{uuid.uuid4().hex}", "enable.auto.commit": False}
            )
        )
        records: list[Record] = []
        deadline = time.monotonic() + timeout
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
            while pending:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"read {len(records)} message(s) of {topic} in {timeout} s; "
                        f"partitions {sorted(pending)} short of their end offsets {ends}"
                    )
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error() is not None:
                    raise RuntimeError(f"reading {topic}: {message.error()}")
                p, offset = message.partition(), message.offset()
                if offset < ends[p]:
                    records.append(Record(p, offset, message.key(), message.value()))
                if offset + 1 >= ends[p]:
                    pending.discard(p)
        finally:
            consumer.close()
        return sorted(records, key=lambda r: (r.partition, r.offset))


def _properties(data: Path, port: int, controller_port: int) -> str:
    """server.properties of a one-node cluster: broker and controller in one process."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": NODE_ID,
        "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": data,
        # one node: internal topics with one replica (and one partition: they start faster)
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "share.coordinator.state.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",  # tests create theirs, with their partitions
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, never starting with
    '-' (as Kafka's own Uuid.randomUuid ensures): the storage tool would read such an id as an
    option and refuse to format (seen once in 64 CI runs' worth of ids)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _java(libs: Path, main: str, *args: str) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise FileNotFoundError("java is not on PATH (Kafka needs Java 17 or later)")
    logging_props = [
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
    ]
    return [java, HEAP, *logging_props, "-cp", f"{libs}/*", main, *args]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def kafka_broker(directory: Path) -> Iterator[KafkaBroker]:
    """A one-node Kafka (KRaft: broker and controller) on 127.0.0.1, its storage formatted under
    `directory`/kafka, until the block ends; its log is `directory`/kafka/broker.log."""
    libs = kafka_libs()  # FileNotFoundError naming `make kafka`
    home = directory / "kafka"
    home.mkdir(parents=True)
    log = home / "broker.log"
    for attempt in range(3):  # a free port taken between our probe and the broker's bind: others
        port, controller_port = free_port(), free_port()
        data = home / f"data-{attempt}"
        config = home / f"server-{attempt}.properties"
        config.write_text(_properties(data, port, controller_port))
        with log.open("ab") as out:
            subprocess.run(
                _java(
                    libs,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    _cluster_id(),
                    "-c",
                    f"{config}",
                ),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=START_TIMEOUT,
            )
            proc = subprocess.Popen(
                _java(libs, "kafka.Kafka", str(config)),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            broker = KafkaBroker(f"127.0.0.1:{port}", log)
            if _started(broker, proc, port):
                yield broker
                return
        finally:
            _stop(proc)
    raise RuntimeError(f"Kafka did not start:\n{_tail(log)}")


def _started(broker: KafkaBroker, proc: subprocess.Popen, port: int) -> bool:
    """True once the broker serves metadata naming itself; False if the process ended first
    (e.g. a port taken); an error if it runs but never answers."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if _accepts(port):
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"Kafka did not listen in {START_TIMEOUT} s:\n{_tail(broker.log)}")
    admin = broker.admin()
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if NODE_ID in admin.list_topics(timeout=2).brokers:
                return True
        except Exception:  # KafkaException until the broker has its metadata
            time.sleep(0.2)
    if proc.poll() is not None:
        return False
    raise RuntimeError(f"Kafka did not answer in {START_TIMEOUT} s:\n{_tail(broker.log)}")


def _tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


# ---------------------------------------------------------------- Spark's Kafka source


def spark_kafka_jars() -> list[Path]:
    """The jars of Spark's Kafka source that `make jars` copies into jars/kafka (spark/kafka/
    pom.xml), beside Delta's (OTEL_DELTA_JARS, as otel_delta.spark.session reads it). Missing:
    an error naming the target, never a skip."""
    from otel_delta.spark.session import DEFAULT_JAR_DIR

    directory = Path(os.environ.get("OTEL_DELTA_JARS", DEFAULT_JAR_DIR)) / "kafka"
    jars = sorted(directory.glob("*.jar"))
    if not any(p.name.startswith("spark-sql-kafka-0-10_") for p in jars):
        raise FileNotFoundError(
            f"{directory}/spark-sql-kafka-0-10_*.jar is missing: run `make jars`"
        )
    return jars


def spark_read(
    bootstrap_servers: str, topic: str, work_dir: Path, timeout: float = 240.0
) -> list[Record]:
    """`spark.read.format("kafka")` of the whole topic (earliest to latest offsets) in a local
    SparkSession of a child process (tests/kafka/spark_read.py), by partition and offset."""
    out = work_dir / f"spark-read-{uuid.uuid4().hex[:8]}.jsonl"
    args = ["--bootstrap-servers", bootstrap_servers, "--topic", topic, "--out", str(out)]
    child = subprocess.run(
        [sys.executable, "-m", "tests.kafka.spark_read", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if child.returncode != 0:
        raise AssertionError(f"the Spark read failed ({child.returncode}):\n{child.stderr[-6000:]}")
    records = []
    for line in out.read_text().splitlines():
        row = json.loads(line)
        key = None if row["key"] is None else base64.b64decode(row["key"])
        records.append(Record(row["partition"], row["offset"], key, base64.b64decode(row["value"])))
    return sorted(records, key=lambda r: (r.partition, r.offset))
