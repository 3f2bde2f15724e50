"""The stream's lag and progress figures, from progress reports shaped as Spark's Kafka source
writes them (offsets as JSON text, topic → partition → offset)."""

from __future__ import annotations

import json
import math

from prometheus_client import REGISTRY

from otel_delta.stream.progress import StreamStatus, lag, offsets

TOPICS = {"spans": "traces", "logs": "logs"}


def report(batch: int, end: dict, latest: dict, messages: int = 10) -> dict:
    source = {"endOffset": json.dumps(end), "latestOffset": json.dumps(latest)}
    return {
        "batchId": batch,
        "numInputRows": messages,
        "inputRowsPerSecond": float("nan"),
        "processedRowsPerSecond": 250.0,
        "sources": [source],
    }


def test_lag_sums_the_partitions_of_each_topic() -> None:
    progress = report(
        0,
        {"spans": {"0": 6, "1": 4}, "logs": {"0": 3}},
        {"spans": {"0": 10, "1": 4}, "logs": {"0": 5}},
    )
    assert lag(progress) == {"spans": 4, "logs": 2}


def test_a_partition_not_read_yet_counts_from_zero_and_none_is_no_lag() -> None:
    assert lag(report(0, {"spans": {"0": 2}}, {"spans": {"0": 2, "1": 7}})) == {"spans": 7}
    assert lag({"sources": [{"endOffset": "null", "latestOffset": None}]}) == {}
    assert offsets("not json") == {} and offsets({"t": {"0": "5"}}) == {"t": {"0": 5}}


def test_status_reports_each_batch_once_and_serves_gauges(caplog) -> None:
    status = StreamStatus(TOPICS)
    caplog.set_level("INFO", "otel_delta.stream.progress")
    first = report(3, {"spans": {"0": 6}}, {"spans": {"0": 30}})
    assert status.observe(first)
    assert not status.observe(first)  # the same report polled again
    assert not status.observe(None)
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        "progress of batch 3: 10 message(s), 0/s arriving, 250/s processed; "
        "messages behind: logs 0, spans 24"
    )
    gauges = {(g.name, g.labels): g.value for g in status.gauges()}
    assert gauges[("stream_last_batch_id", ())] == 3
    assert gauges[("stream_messages_behind", ())] == 24
    assert (
        gauges[("stream_topic_messages_behind", (("topic", "spans"), ("signal", "traces")))] == 24
    )
    assert gauges[("stream_topic_messages_behind", (("topic", "logs"), ("signal", "logs")))] == 0
    assert status.observe(report(4, {"spans": {"0": 30}}, {"spans": {"0": 30}}))
    assert status.gauges()[3].value == 0


def test_batches_count_rows_per_table() -> None:
    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = sample("otel_delta_stream_rows_total", table="spans")
    dead = sample("otel_delta_stream_dead_letters_total")
    StreamStatus(TOPICS).batch_done(5, {"spans": 40, "logs": 2}, dead=1, rejected=0, seconds=0.5)
    assert sample("otel_delta_stream_rows_total", table="spans") == before + 40
    assert sample("otel_delta_stream_dead_letters_total") == dead + 1


def test_ready_only_while_the_query_runs_without_failure() -> None:
    status = StreamStatus(TOPICS)
    assert not status.checks()[0].ok
    status.active = True
    assert status.checks()[0].ok
    status.failure = "Kafka went away"
    [check] = status.checks()
    assert not check.ok and check.detail == "Kafka went away"


def test_the_batch_after_an_idle_trigger_is_reported_though_its_id_was_seen() -> None:
    """Spark reports an idle trigger (no new messages) under the id of the batch that has not
    run yet; when messages arrive, that batch runs and is reported under the same id. Its lag
    and rates must be taken in, not dropped as a report already seen."""
    status = StreamStatus(TOPICS)
    assert status.observe(report(7, {"spans": {"0": 30}}, {"spans": {"0": 30}}))
    idle = report(8, {"spans": {"0": 30}}, {"spans": {"0": 30}}, messages=0)
    assert status.observe(idle)
    assert not status.observe(idle)  # polled again
    assert not status.observe({**idle, "timestamp": "later"})  # the next idle report
    ran = report(8, {"spans": {"0": 130}}, {"spans": {"0": 500}}, messages=100)
    assert status.observe(ran)
    assert not status.observe(ran)  # polled again
    gauges = {(g.name, g.labels): g.value for g in status.gauges()}
    assert gauges[("stream_last_batch_id", ())] == 8
    assert gauges[("stream_messages_behind", ())] == 370
    assert gauges[("stream_processed_messages_per_second", ())] == 250.0
    assert status.observe(report(9, {"spans": {"0": 500}}, {"spans": {"0": 500}}))


def test_a_stuck_batch_fails_readiness_and_lag_is_unknown_before_the_first_report() -> None:
    """Figures change only when Spark reports: a batch stuck on storage that is down (or the
    first batch after a restart, which may be the whole backlog) showed 0 messages behind and
    a ready job. Lag is NaN until the first report; /readyz fails once no report, not even an
    idle trigger's, came for stream.stall_seconds."""
    now = [1000.0]
    status = StreamStatus(TOPICS, stall_seconds=60, clock=lambda: now[0])
    status.active = True
    gauges = {(g.name, g.labels): g.value for g in status.gauges()}
    assert math.isnan(gauges[("stream_messages_behind", ())])
    assert math.isnan(
        gauges[("stream_topic_messages_behind", (("topic", "spans"), ("signal", "traces")))]
    )
    assert status.checks()[0].ok  # just started
    now[0] += 59
    assert status.checks()[0].ok
    now[0] += 1
    [check] = status.checks()
    assert not check.ok and "no progress reported for 60 s" in check.detail

    assert status.observe(report(0, {"spans": {"0": 5}}, {"spans": {"0": 9}}))
    assert status.checks()[0].ok
    gauges = {(g.name, g.labels): g.value for g in status.gauges()}
    assert gauges[("stream_messages_behind", ())] == 4
    assert gauges[("stream_seconds_since_progress", ())] == 0

    idle = {**report(1, {"spans": {"0": 9}}, {"spans": {"0": 9}}, messages=0), "timestamp": "t1"}
    for stamp in ("t1", "t2", "t3"):  # idle triggers, reported under the next batch's id
        now[0] += 50
        status.observe({**idle, "timestamp": stamp})
        assert status.checks()[0].ok  # no data is not a stall
    now[0] += 60
    assert not status.checks()[0].ok


def test_a_stall_is_logged_once_and_its_end_once(caplog) -> None:
    """S3 down under a running stream: Spark retries quietly, so the log said nothing for the
    whole outage; now one warning when the stall crosses stream.stall_seconds, and one line
    when progress is reported again."""
    now = [1000.0]
    status = StreamStatus(TOPICS, stall_seconds=60, clock=lambda: now[0])
    status.active = True
    assert status.observe(report(0, {"spans": {"0": 5}}, {"spans": {"0": 5}}))
    caplog.clear()
    with caplog.at_level("INFO", logger="otel_delta.stream.progress"):
        for _ in range(5):  # the driver loop looks every second
            now[0] += 30
            status.log_stall()
        stalled = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert stalled == [
            "no progress reported for 60 s (stream.stall_seconds): a batch waiting on storage "
            "or Kafka?"
        ]
        assert status.observe(report(1, {"spans": {"0": 9}}, {"spans": {"0": 9}}))
        status.log_stall()
        status.log_stall()
    back = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
    assert back == ["progress reported again after a stall"]


def test_reports_polled_again_are_not_progress() -> None:
    """The driver loop passes every report Spark keeps (`recentProgress`, oldest first) to
    `observe` each second. With the broker gone for minutes, /readyz stayed 200 and no stall
    was logged: each look took the older reports' timestamps for new ones."""
    now = [1000.0]
    status = StreamStatus(TOPICS, stall_seconds=60, clock=lambda: now[0])
    status.active = True
    kept = [
        {**report(0, {"spans": {"0": 5}}, {"spans": {"0": 9}}), "timestamp": t}
        for t in ("2026-11-29T04:47:30.807Z", "2026-11-29T04:47:32.367Z")
    ]
    for _ in range(3):  # three looks, 30 s apart, at the same reports
        for progress in kept:
            status.observe(progress)
        now[0] += 30
    [check] = status.checks()
    assert not check.ok and "no progress reported for 90 s" in check.detail


def test_progress_is_awaited_from_the_query_s_start_not_the_job_s() -> None:
    """Found by the streaming review: with stall_seconds 20, the job warned "no progress
    reported for 32 s" one second after its query started: Spark's start counted."""
    now = [1000.0]
    status = StreamStatus(TOPICS, stall_seconds=20, clock=lambda: now[0])
    now[0] += 31  # Spark starting
    status.query_started()
    now[0] += 1
    assert status.checks()[0].ok
    now[0] += 19
    [check] = status.checks()
    assert not check.ok and "no progress reported for 20 s" in check.detail
