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
import time
from collections.abc import Callable, Mapping
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
    # no progress report for this long: the query is stuck (`stream.stall_seconds`)
    stall_seconds: float = 600.0
    clock: Callable[[], float] = time.monotonic
    last_batch: int = -1
    # None until the first report: unknown, not 0 (a restarted job's first batch may be the
    # whole backlog, which would otherwise read as nothing behind until it is done)
    behind: dict[str, int] | None = None
    input_rate: float = 0.0  # messages/s arriving, Spark's figure for the last batch
    processed_rate: float = 0.0  # messages/s processed in the last batch
    active: bool = False
    failure: str = ""
    _last_idle: bool = False  # the last report taken in was of an idle trigger
    # the newest report's timestamp: Spark's ISO-8601 UTC text, which sorts as time does
    _last_stamp: str | None = None
    _last_report: float | None = None  # when it was taken in (clock), None: none yet
    _stall_logged: bool = False  # the stall has its log line (`log_stall`)
    _started: float = field(default=0.0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._started = self.clock()

    def query_started(self) -> None:
        """The streaming query runs: progress is awaited from now, not from the job's start
        (Spark's start took 30 s on a busy machine, and the first look warned of a stall)."""
        with self._lock:
            self._started = self.clock()
        self.active = True

    def quiet_seconds(self) -> float:
        """Seconds since Spark last reported progress (a batch, or an idle trigger: Spark
        reports those too), or since the job started when it has reported none."""
        last = self._last_report if self._last_report is not None else self._started
        return self.clock() - last

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
        stamp = progress.get("timestamp")
        # only a newer report is progress (an idle trigger's, too): the driver loop passes
        # every report Spark keeps, oldest first, each time it looks, so "another stamp than
        # the last" was true of the older ones on every look and no stall was ever seen
        if stamp is not None and (self._last_stamp is None or str(stamp) > self._last_stamp):
            self._last_stamp, self._last_report = str(stamp), self.clock()
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
        self._last_report = self.clock()
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
            ", ".join(f"{t} {n}" for t, n in sorted((self.behind or {}).items())),
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
                    "Kafka messages not yet read, all topics, after the last batch (NaN "
                    "before the first report)",
                    math.nan if self.behind is None else sum(self.behind.values()),
                ),
                Gauge(
                    "stream_seconds_since_progress",
                    "Seconds since Spark last reported progress (a batch or an idle trigger)",
                    self.quiet_seconds(),
                ),
            ]
            figures += [
                Gauge(
                    "stream_topic_messages_behind",
                    "Kafka messages of a topic not yet read after the last batch (NaN before "
                    "the first report)",
                    math.nan if self.behind is None else self.behind.get(topic, 0),
                    (("topic", topic), ("signal", signal)),
                )
                for topic, signal in sorted(self.topics.items())
            ]
        return figures

    def _stall(self) -> str:
        """What /readyz and the log say of a query with no progress for `stall_seconds`
        ("" while it makes progress, or is not running, or failed)."""
        quiet = self.quiet_seconds()
        if not self.active or self.failure or quiet < self.stall_seconds:
            return ""
        return (
            f"no progress reported for {quiet:.0f} s (stream.stall_seconds): a batch "
            "waiting on storage or Kafka?"
        )

    def log_stall(self) -> None:
        """One warning when the query stalls, one line when progress is back. A store that is
        down or does not answer stalls a batch quietly: Spark retries its checkpoint writes
        and nothing else would say so in the log (measured: 60 s of S3 down, no line)."""
        stall = self._stall()
        if stall and not self._stall_logged:
            log.warning("%s", stall)
        elif not stall and self._stall_logged and self.active:
            log.info("progress reported again after a stall")
        self._stall_logged = bool(stall)

    def checks(self) -> list[Check]:
        stall = self._stall()
        if self.failure:
            detail = self.failure
        elif not self.active:
            detail = "the streaming query is not running"
        else:
            detail = stall
        return [Check("stream", self.active and not self.failure and not stall, detail)]


def _rate(value: Any) -> float:
    """Spark's rate, 0 where it has none (None, or NaN for a batch of no duration)."""
    rate = float(value or 0.0)
    return rate if math.isfinite(rate) else 0.0
