"""The child process of `tests.kafka.spark_read`: a batch read of one Kafka topic with Spark's
Kafka source, written out as JSON lines (partition, offset, base64 key and value).

Its own JVM, so that `spark.jars` (Delta's jars and jars/kafka/) is honoured whatever session
the test process already has. The session is the project's (otel_delta.spark.session), on
local[1], with the Kafka jars added through its `conf`:

    python -m tests.kafka.spark_read --bootstrap-servers 127.0.0.1:PORT --topic T --out F
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    from otel_delta.config import SparkSettings
    from otel_delta.spark.session import delta_jars, spark_session
    from tests.kafka import spark_kafka_jars

    jars = [*delta_jars(), *spark_kafka_jars()]
    spark = spark_session(
        SparkSettings(app_name="kafka-read", ui_enabled=False),
        master="local[1]",
        conf={"spark.jars": ",".join(str(p) for p in jars)},
    )
    try:
        frame = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        rows = frame.select("partition", "offset", "key", "value").collect()
    finally:
        spark.stop()

    def text(data: bytes | bytearray | None) -> str | None:
        return None if data is None else base64.b64encode(bytes(data)).decode()

    with args.out.open("w") as out:
        for row in rows:
            record = {
                "partition": row["partition"],
                "offset": row["offset"],
                "key": text(row["key"]),
                "value": text(row["value"]),
            }
            out.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
