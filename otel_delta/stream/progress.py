"""What the streaming job reports about itself: per micro-batch, a progress line in its log and
Prometheus series on its admin endpoint (`[stream] admin_endpoint`, /metrics).

Lag is the number of Kafka messages the job has not read yet, per topic: the sum over the
topic's partitions of Spark's `latestOffset` minus the `endOffset` the batch read up to, both
from the query's progress report (Spark's Kafka source puts the newest offsets it saw there).
It is a figure of the last batch, as kafka-delta-ingest and Spark's own UI report it; between
batches a topic can grow, which the next batch's figure shows.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Histogram

from otel_delta.admin import Check, Gauge

log = logging.getLogger(__name__)

# The stream job's series, on its own admin endpoint: defined here, where only `otel-delta
# stream` loads them, so a bridge's /metrics does not carry them, always zero
STREAM_BATCH_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

STREAM_BATCHES = Counter("otel_delta_stream_batches", "Micro-batches the stream committed")
STREAM_MESSAGES = Counter(
    "otel_delta_stream_messages", "Kafka messages the stream read and converted"
)
STREAM_ROWS = Counter("otel_delta_stream_rows", "Rows the stream appended, by table", ["table"])
STREAM_DEAD_LETTERS = Counter(
    "otel_delta_stream_dead_letters", "Kafka messages the stream moved to _dead_letters"
)
STREAM_REJECTED_ITEMS = Counter(
    "otel_delta_stream_rejected_items", "Items admission refused inside otherwise good messages"
)
STREAM_BATCH_SECONDS = Histogram(
    "otel_delta_stream_batch_duration_seconds",
    "Duration of one micro-batch (convert and commit every table)",
    buckets=STREAM_BATCH_BUCKETS,
)


def offsets(value: Any) -> dict[str, dict[str, int]]:
    """topic → partition → offset, from a progress report's offset field (JSON text or dict)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, Mapping):
        return {}
    return {
        str(topic): {str(p): int(o) for p, o in parts.items()}
        for topic, parts in value.items()
        if isinstance(parts, Mapping)
    }


def lag(progress: Mapping[str, Any]) -> dict[str, int]:
    """Messages behind per topic after this batch (0 when the batch reached the newest)."""
    behind: dict[str, int] = {}
    for source in progress.get("sources") or []:
        latest = offsets(source.get("latestOffset"))
        read = offsets(source.get("endOffset"))
        for topic, parts in latest.items():
            done = read.get(topic, {})
            behind[topic] = behind.get(topic, 0) + sum(
                max(0, newest - done.get(part, 0)) for part, newest in parts.items()
            )
    return behind


@dataclass
class StreamStatus:
    """The job's state as /metrics and /readyz see it: updated by the batch function (rows)
    and by the driver loop (progress reports); read by the admin server's thread."""

    topics: dict[str, str]  # topic → signal
    last_batch: int = -1
    behind: dict[str, int] = field(default_factory=dict)
    input_rate: float = 0.0  # messages/s arriving, Spark's figure for the last batch
    processed_rate: float = 0.0  # messages/s processed in the last batch
    active: bool = False
    failure: str = ""
    _last_idle: bool = False  # the last report taken in was of an idle trigger
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def batch_done(
        self, messages: int, rows: Mapping[str, int], dead: int, rejected: int, seconds: float
    ) -> None:
        STREAM_BATCHES.inc()
        STREAM_MESSAGES.inc(messages)
        for table, count in rows.items():
            STREAM_ROWS.labels(table).inc(count)
        STREAM_DEAD_LETTERS.inc(dead)
        STREAM_REJECTED_ITEMS.inc(rejected)
        STREAM_BATCH_SECONDS.observe(seconds)

    def observe(self, progress: Mapping[str, Any] | None) -> bool:
        """Take a progress report in; log a line for a batch not seen before (True then)."""
        if not progress:
            return False
        batch = int(progress.get("batchId", -1))
        idle = not int(progress.get("numInputRows") or 0)
        # A report of an idle trigger carries the id of the next batch, which has not run yet;
        # that batch's own report, once it has run, has the same id. So an id seen before is
        # new again once, when the report seen was an idle one and this one is not.
        if batch < self.last_batch or (
            batch == self.last_batch and not (self._last_idle and not idle)
        ):
            return False
        behind = lag(progress)
        with self._lock:
            self.last_batch = batch
            self._last_idle = idle
            self.behind = {**{t: 0 for t in self.topics}, **behind}
            self.input_rate = _rate(progress.get("inputRowsPerSecond"))
            self.processed_rate = _rate(progress.get("processedRowsPerSecond"))
        log.info(
            "progress of batch %d: %d message(s), %.0f/s arriving, %.0f/s processed; "
            "messages behind: %s",
            batch,
            int(progress.get("numInputRows") or 0),
            self.input_rate,
            self.processed_rate,
            ", ".join(f"{t} {n}" for t, n in sorted(self.behind.items())),
        )
        return True

    def gauges(self) -> list[Gauge]:
        with self._lock:
            figures = [
                Gauge(
                    "stream_last_batch_id", "Id of the last micro-batch reported", self.last_batch
                ),
                Gauge(
                    "stream_input_messages_per_second",
                    "Messages/s arriving in Kafka, Spark's figure for the last batch",
                    self.input_rate,
                ),
                Gauge(
                    "stream_processed_messages_per_second",
                    "Messages/s the last batch processed",
                    self.processed_rate,
                ),
                Gauge(
                    "stream_messages_behind",
                    "Kafka messages not yet read, all topics, after the last batch",
                    sum(self.behind.values()),
                ),
            ]
            figures += [
                Gauge(
                    "stream_topic_messages_behind",
                    "Kafka messages of a topic not yet read after the last batch",
                    self.behind.get(topic, 0),
                    (("topic", topic), ("signal", signal)),
                )
                for topic, signal in sorted(self.topics.items())
            ]
        return figures

    def checks(self) -> list[Check]:
        detail = self.failure or ("" if self.active else "the streaming query is not running")
        return [Check("stream", self.active and not self.failure, detail)]


def _rate(value: Any) -> float:
    """Spark's rate, 0 where it has none (None, or NaN for a batch of no duration)."""
    rate = float(value or 0.0)
    return rate if math.isfinite(rate) else 0.0
