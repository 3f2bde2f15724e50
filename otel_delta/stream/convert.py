"""The Kafka messages of one micro-batch → Parquet files of the tables, in the executors.

Each message is what the Collector's `kafka` exporter writes with `encoding: otlp_proto`: one
serialized Export*ServiceRequest, its signal known from its topic (or, with `encoding:
otlp_json`, the same request as OTLP/JSON, decoded as the backfill decodes it). It is converted
with the receiver's own converters (`Signal.convert`), so streamed rows equal ingested rows. The
task writes the rows itself, one file per table and partition (otel_delta.engines.data_files:
the table's layout, statistics as delta-rs records them), and returns only the files'
descriptions: the rows never pass through the JVM, and the driver commits each table's files in
one delta-rs commit. Files of a batch that is never committed (a crash before the commit) are
referenced by no log entry; vacuum removes them once a week old (engines/vacuum.py).

A message that does not parse (or is another signal's, or whose conversion fails) becomes a
`_dead_letters` row: `file` = "kafka://<topic>/<partition>", `offset` = its Kafka offset,
`line` = NULL, `reason` = "topic <t> partition <p> offset <o>: <why>", `file_sha256` = SHA-256
of the message value, `raw` = the value (first 1 MiB).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
from google.protobuf.message import DecodeError, Message

from otel_delta.backfill.decode import UndecodableRecord, decode_payload
from otel_delta.backfill.stage import MAX_RAW_BYTES
from otel_delta.convert import utf8
from otel_delta.engines.data_files import table_filesystem, write_partitioned
from otel_delta.faults import pause_point
from otel_delta.lakehouse import table_uri
from otel_delta.pipeline.admission import admit
from otel_delta.signals import SIGNALS_BY_NAME, Signal
from otel_delta.tables import TABLES
from otel_delta.tables.layout import Layout
from otel_delta.tables.schemas import DEAD_LETTER_TABLE, DEAD_LETTERS
from otel_delta.tables.versions import conform

# `table` of a task's stats row: messages in `rows`, rejected items in `rejected`, where and
# why the first was in `reason`
STATS = ""
MESSAGE_COLUMNS = ("topic", "partition", "offset", "value")
WRITTEN = pa.schema(  # what a task returns: a row per file written, and its stats row
    [
        pa.field("table", pa.string()),
        pa.field("rows", pa.int64()),
        pa.field("rejected", pa.int64()),
        pa.field("path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("partition_values", pa.string()),  # JSON object
        pa.field("stats", pa.string()),
        pa.field("reason", pa.string()),  # the stats row's
    ]
)


@dataclass(frozen=True)
class FileTarget:
    """Where and how the executors write (pickled into each task)."""

    root: str
    storage: dict[str, str] | None
    partition_by: tuple[str, ...]
    compression: str
    compression_level: int
    stats_columns: dict[str, frozenset[str] | None]  # per table: None = every column
    # per existing table, its own schema (an older version's or evolved); others: the current
    schemas: dict[str, pa.Schema]

    def write(self, name: str, rows: pa.Table) -> list[dict]:
        telemetry = name != DEAD_LETTER_TABLE
        schema = self.schemas.get(name, TABLES[name].schema) if telemetry else DEAD_LETTERS
        if telemetry:
            rows = conform(name, schema, rows)
        files = write_partitioned(
            rows,
            schema,
            self.partition_by if telemetry else (),
            table_filesystem(table_uri(self.root, name), self.storage),
            TABLES[name].layout if telemetry else Layout(),
            self.compression,
            self.compression_level,
            _as_set(self.stats_columns.get(name)),
        )
        return [
            {
                "table": name,
                "rows": f.rows,
                "rejected": 0,
                "path": f.path,
                "size": f.size,
                "partition_values": json.dumps(f.partition_values),
                "stats": f.stats,
            }
            for f in files
        ]


def _as_set(columns: frozenset[str] | None) -> set[str] | None:
    return None if columns is None else set(columns)


def dead_letter(topic: str, partition: int, offset: int, reason: str, value: bytes) -> dict:
    return {
        "file": f"kafka://{topic}/{partition}",
        "file_sha256": hashlib.sha256(value).hexdigest(),
        "offset": offset,
        "line": None,
        "reason": f"topic {topic} partition {partition} offset {offset}: {reason}",
        "raw": value[:MAX_RAW_BYTES],
        "loaded_at": datetime.now(UTC),
    }


def decode(signal: Signal, value: bytes) -> Message:
    """A message of `signal`'s topic → its Export request: OTLP/JSON (the exporter's `encoding:
    otlp_json`) or protobuf (`otlp_proto`; strings that are not UTF-8 repaired,
    convert/utf8.py), told apart as the backfill tells its records (`decode_payload`).
    UndecodableRecord: the message is neither, or is another signal's."""

    def proto(payload: bytes) -> tuple[Signal, Message]:
        try:
            return signal, utf8.parse(signal.request, payload)[0]
        except (DecodeError, RecursionError) as exc:
            raise UndecodableRecord(
                f"not an OTLP protobuf {signal.request.__name__}: {exc}"
            ) from None

    found, request = decode_payload(value, proto)
    if found is not signal:
        raise UndecodableRecord(
            f"an OTLP/JSON {found.request.__name__} on a topic of {signal.name}"
        )
    return request


def convert_messages(
    messages: pa.RecordBatch, topics: dict[str, str], partition_by: Sequence[str] = ()
) -> tuple[dict[str, list[pa.Table]], list[dict], int, str]:
    """(tables by name, dead-letter rows, rejected items, where and why the first was) of a
    batch of Kafka messages, past the receiver's admission rules for tables partitioned by
    `partition_by`: without them a `service.name` too long for a directory name failed the
    batch's task, and every later run of it, so that Kafka partition stopped for good; and
    a time at or after 2^63 ns was filed under a date before 1970."""
    tables: dict[str, list[pa.Table]] = {}
    dead: list[dict] = []
    rejected, first_reason = 0, ""
    columns = [messages.column(name).to_pylist() for name in MESSAGE_COLUMNS]
    for topic, partition, offset, value in zip(*columns, strict=True):
        value = value or b""
        signal = SIGNALS_BY_NAME[topics[topic]]
        try:
            request = decode(signal, value)
        except UndecodableRecord as exc:
            dead.append(dead_letter(topic, partition, offset, str(exc), value))
            continue
        try:
            converted = admit(signal.convert(request), partition_by)
        except Exception as exc:  # a converter bug must not stop the stream
            reason = f"conversion failed: {exc!r}"
            dead.append(dead_letter(topic, partition, offset, reason, value))
            continue
        if converted.rejected.count and not rejected:
            first_reason = f"{topic}/{partition} at {offset}: {converted.rejected.error_message}"
        rejected += converted.rejected.count
        for name, table in converted.tables.items():
            if table.num_rows:
                tables.setdefault(name, []).append(table)
    return tables, dead, rejected, first_reason


def convert_task(topics: dict[str, str], target: FileTarget) -> Callable:
    """The `mapInArrow` function over (topic, partition, offset, value) batches: converts,
    writes the files, yields their descriptions."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            pause_point("stream-converting")
            tables, dead, rejected, reason = convert_messages(batch, topics, target.partition_by)
            outputs = {name: pa.concat_tables(parts) for name, parts in tables.items()}
            if dead:
                outputs[DEAD_LETTER_TABLE] = pa.Table.from_pylist(dead, schema=DEAD_LETTERS)
            rows = [row for name, table in outputs.items() for row in target.write(name, table)]
            rows.append(
                {"table": STATS, "rows": batch.num_rows, "rejected": rejected, "reason": reason}
            )
            yield pa.RecordBatch.from_pylist(rows, schema=WRITTEN)

    return run
