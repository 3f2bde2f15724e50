"""The write-ahead log on a real directory: group fsync, order, recovery, release, bounds."""

from __future__ import annotations

import asyncio
import resource
import shutil
import signal
from pathlib import Path

import pytest

from otel_delta.errors import ConfigError, RequestTooLargeError, WalError, WalFullError
from otel_delta.wal import WriteAheadLog
from otel_delta.wal.record import HEADER_BYTES, Record, header
from otel_delta.wal.segments import list_segments


def new_log(directory: Path, **options: int) -> WriteAheadLog:
    settings = {"segment_bytes": 1 << 20, "max_bytes": 1 << 30, **options}
    wal = WriteAheadLog(directory, **settings)
    wal.open()
    return wal


def test_concurrent_appends_share_fsyncs_and_arrive_in_position_order(tmp_path: Path) -> None:
    durable: list[tuple[int, str]] = []

    async def scenario() -> list[int]:
        wal = new_log(tmp_path)
        wal.on_durable = lambda position, item: durable.append((position, item))
        wal.start()
        positions = await asyncio.gather(
            *(wal.append(1, f"r{i}".encode(), f"r{i}", commits=1) for i in range(200))
        )
        assert wal.syncs < 200  # grouped: one fsync served many records
        await wal.close()
        return positions

    positions = asyncio.run(scenario())
    assert sorted(positions) == list(range(1, 201))
    assert [p for p, _ in durable] == list(range(1, 201))  # handed on in log order
    assert {item for _, item in durable} == {f"r{i}" for i in range(200)}
    reopened = new_log(tmp_path)
    assert [(r.position, r.payload) for r in reopened.replay()] == [
        (p, item.encode()) for p, item in durable
    ]
    assert reopened.next_position == 201
    assert reopened.instance_id and len(reopened.app_id) > len(reopened.instance_id)


def test_a_torn_tail_is_cut_and_the_log_goes_on(tmp_path: Path) -> None:
    async def write(payloads: list[bytes]) -> None:
        wal = new_log(tmp_path)
        wal.start()
        for payload in payloads:
            await wal.append(2, payload, None, commits=1)
        await wal.close()

    asyncio.run(write([b"a", b"b", b"c"]))
    segment = list_segments(tmp_path)[-1].path
    whole = segment.stat().st_size
    with open(segment, "ab") as out:
        out.write(b"\x57\x4f\x01\x00\xff")  # a write that died half-way
    asyncio.run(write([b"d"]))
    assert segment.stat().st_size > whole
    assert [(r.position, r.payload) for r in new_log(tmp_path).replay()] == [
        (1, b"a"),
        (2, b"b"),
        (3, b"c"),
        (4, b"d"),
    ]


def test_segments_are_released_once_committed_and_positions_never_repeat(tmp_path: Path) -> None:
    async def scenario() -> None:
        wal = new_log(tmp_path, segment_bytes=200)
        wal.start()
        for _ in range(30):  # ~100-byte records: several segments
            await wal.append(3, bytes(80), None, commits=2)
        assert len(list_segments(tmp_path)) > 3
        wal.committed(list(range(1, 31)))  # one of two commits each: nothing released
        assert list_segments(tmp_path)[0].first_position == 1
        wal.committed(list(range(1, 21)))
        first = list_segments(tmp_path)[0].first_position
        assert 1 < first <= 21
        wal.committed(list(range(21, 31)))
        assert len(list_segments(tmp_path)) == 1  # the active segment stays
        assert wal.low_watermark == 31
        await wal.close()

    asyncio.run(scenario())
    reopened = new_log(tmp_path)
    assert all(r.position >= 21 for r in reopened.replay())
    assert reopened.next_position == 31


def test_records_without_rows_are_released_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        wal = new_log(tmp_path, segment_bytes=100)
        wal.start()
        for _ in range(10):
            await wal.append(1, bytes(60), None, commits=0)  # e.g. every item rejected
        assert len(list_segments(tmp_path)) == 1
        await wal.close()

    asyncio.run(scenario())


def test_full_log_refuses_with_a_retryable_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        wal = new_log(tmp_path, max_bytes=300, segment_bytes=10_000)
        wal.start()
        await wal.append(1, bytes(200), None, commits=1)
        with pytest.raises(WalFullError) as full:
            await wal.append(1, bytes(200), None, commits=1)
        assert full.value.retry_after_seconds == 1.0
        wal.committed([1])
        await wal.close()

    asyncio.run(scenario())


def test_a_request_no_empty_log_could_hold_is_too_large_not_full(tmp_path: Path) -> None:
    """A request over wal.max_bytes was refused as "full, retry later" though the log held
    nothing: its client sent it again for ever, and the refusal kept /readyz failing after
    smaller requests had been taken and committed. It is refused for good (413 /
    RESOURCE_EXHAUSTED), and the log is not full for it."""

    async def scenario() -> None:
        wal = new_log(tmp_path, max_bytes=2000, segment_bytes=500)
        wal.start()
        with pytest.raises(RequestTooLargeError, match=r"over wal\.max_bytes \(2000\)"):
            await wal.append(1, bytes(3000), None, commits=1)
        assert wal.refusing() == ""
        position = await wal.append(1, bytes(300), None, commits=1)
        wal.committed([position])
        assert wal.refusing() == ""
        await wal.close()

    asyncio.run(scenario())


def test_a_refusal_is_forgotten_once_everything_is_committed(tmp_path: Path) -> None:
    """A record larger than segment_bytes goes whole into the newest segment, which is never
    deleted: once it was committed, the log still counted it, so a request that did not fit
    beside it was refused (and /readyz said "full") for good, with nothing left to commit.
    When every record is committed the log frees them for the next one, and is ready."""

    async def scenario() -> None:
        wal = new_log(tmp_path, max_bytes=4000, segment_bytes=1000)
        full_calls: list[None] = []
        wal.on_full = lambda: full_calls.append(None)
        wal.start()
        first = await wal.append(1, b"a" * 2500, None, commits=1)
        with pytest.raises(WalFullError):
            await wal.append(1, b"b" * 2500, None, commits=1)
        assert full_calls and wal.refusing().startswith("full:")
        wal.committed([first])  # the commit the refusal asked for
        assert wal.refusing() == ""
        assert await wal.append(1, b"b" * 2500, None, commits=1) == first + 1
        assert wal.disk_bytes <= wal.max_bytes
        await wal.close()

    asyncio.run(scenario())
    assert [r.payload for r in new_log(tmp_path).replay()] == [b"b" * 2500]


def test_one_process_per_directory(tmp_path: Path) -> None:
    first = new_log(tmp_path)
    with pytest.raises(ConfigError, match="in use"):
        new_log(tmp_path)
    asyncio.run(first.close())
    new_log(tmp_path)  # free again once closed


def test_an_unusable_directory_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match=r"wal\.dir: cannot use .*file"):
        new_log(blocker / "wal")


def test_a_clean_stop_with_everything_committed_leaves_no_record(tmp_path: Path) -> None:
    async def scenario() -> None:
        wal = new_log(tmp_path, segment_bytes=200)
        wal.start()
        for _ in range(12):
            await wal.append(1, bytes(80), None, commits=1)

        async def commit_the_rest() -> None:  # what the buffer does while the bridge stops
            wal.committed(list(range(1, 13)))

        await wal.close(drain=commit_the_rest())

    asyncio.run(scenario())
    reopened = new_log(tmp_path)
    assert list(reopened.replay()) == []  # nothing to replay, into any lakehouse
    assert reopened.next_position == 13  # positions never repeat


def test_a_log_with_records_belongs_to_its_lakehouse(tmp_path: Path) -> None:
    async def scenario() -> None:
        wal = new_log(tmp_path, owner="/lake/a")  # type: ignore[arg-type]
        wal.start()
        await wal.append(1, b"rows", None, commits=1)  # never committed: stays
        await wal.close()

    asyncio.run(scenario())
    with pytest.raises(ConfigError, match="holds records for the lakehouse /lake/a, not /lake/b"):
        new_log(tmp_path, owner="/lake/b")  # type: ignore[arg-type]
    again = new_log(tmp_path, owner="/lake/a")  # type: ignore[arg-type]
    assert [r.payload for r in again.replay()] == [b"rows"]
    again.expect(1, 1)

    async def commit_and_stop() -> None:
        again.start()

        async def commit() -> None:
            again.committed([1])

        await again.close(drain=commit())

    asyncio.run(commit_and_stop())
    moved = new_log(tmp_path, owner="/lake/b")  # type: ignore[arg-type]
    assert list(moved.replay()) == [] and moved.next_position == 2


def test_a_write_the_disk_refused_leaves_nothing_behind_for_the_next_one(tmp_path: Path) -> None:
    """A full disk refuses one group's write (the Exports get the retryable answer); once there
    is room again, the next records must follow the last good one in the file. Bytes of the
    refused group still held in a write buffer must not reach the file after the truncate:
    they would sit between two good records, and a restart would cut every acknowledged
    record after them as a torn tail. The disk is made "full" with RLIMIT_FSIZE (EFBIG), so
    the kernel itself refuses the write, part-way through the group."""
    segment = None

    async def scenario() -> None:
        nonlocal segment
        wal = new_log(tmp_path)
        wal.start()
        await wal.append(1, b"a" * 100, None, commits=1)
        segment = list_segments(tmp_path)[-1].path
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        try:
            # room for a few bytes of the next record only
            resource.setrlimit(resource.RLIMIT_FSIZE, (segment.stat().st_size + 10, hard))
            with pytest.raises(WalError, match="write-ahead log"):
                await wal.append(1, b"b" * 100, None, commits=1)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
        await wal.append(1, b"c" * 100, None, commits=1)
        await wal.close()

    asyncio.run(scenario())
    reopened = new_log(tmp_path)
    assert [(r.position, r.payload) for r in reopened.replay()] == [
        (1, b"a" * 100),
        (2, b"c" * 100),
    ]
    assert segment is not None and segment.stat().st_size == 2 * (HEADER_BYTES + 100)


def test_refusing_says_why_while_the_next_request_would_be_refused(tmp_path: Path) -> None:
    """/readyz asks `refusing()`: a log that refuses requests for want of room, or whose last
    write failed (the disk full), must not look ready, or a load balancer keeps sending it
    traffic it answers 503. It is ready again once commits free room, and after a good write
    (or WRITE_FAILURE_HOLD_SECONDS without one, when no traffic comes to tell)."""

    async def scenario() -> None:
        wal = new_log(tmp_path, segment_bytes=1 << 10, max_bytes=1 << 12)
        wal.start()
        assert wal.refusing() == ""
        positions = [await wal.append(1, b"x" * 900, None, commits=1) for _ in range(4)]
        # below max_bytes, but no room for a request like the one it refuses next
        assert wal.disk_bytes < wal.max_bytes and wal.refusing() == ""
        with pytest.raises(WalFullError):
            await wal.append(1, b"y" * 900, None, commits=1)
        assert wal.refusing().startswith("full:")
        for position in positions:  # committed: their segments go
            wal.committed([position])
        assert wal.disk_bytes < 1 << 10 and wal.refusing() == ""

        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        try:  # the next record goes to a new segment (this one has no room): none may grow
            resource.setrlimit(resource.RLIMIT_FSIZE, (10, hard))
            with pytest.raises(WalError):
                await wal.append(1, b"z" * 100, None, commits=1)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
        assert wal.refusing().startswith("a write failed 0 s ago")
        await wal.append(1, b"z" * 100, None, commits=1)
        assert wal.refusing() == ""
        await wal.close()

    asyncio.run(scenario())


def test_a_disk_full_of_committed_records_is_freed_for_the_next_write(tmp_path: Path) -> None:
    """The newest segment is never deleted, so a disk that filled up held the committed records
    in it for good: every later write failed (each Export answered UNAVAILABLE, the bridge
    never ready for long) though nothing awaited a commit. A write the disk refuses while every
    record is committed starts a new segment, deletes the full one and is written there.
    RLIMIT_FSIZE stands in for the full disk: the kernel refuses the write past it."""
    old_segment = None

    async def scenario() -> None:
        nonlocal old_segment
        wal = new_log(tmp_path)
        wal.start()
        positions = [await wal.append(1, b"a" * 100, None, commits=1) for _ in range(3)]
        wal.committed(positions)
        old_segment = list_segments(tmp_path)[-1].path
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        try:  # no room for another record in this segment
            resource.setrlimit(resource.RLIMIT_FSIZE, (old_segment.stat().st_size + 10, hard))
            assert await wal.append(1, b"b" * 100, None, commits=1) == 4
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
        assert wal.refusing() == ""
        await wal.close()

    asyncio.run(scenario())
    assert old_segment is not None and not old_segment.exists()
    assert [(r.position, r.payload) for r in new_log(tmp_path).replay()] == [(4, b"b" * 100)]


def test_writes_that_keep_failing_are_one_error_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On a full disk every client's retry fails, dozens a second: one ERROR says so, not one
    per write, and one line says when writes succeed again; a disk that fills again soon
    after (commits free it, traffic refills it) adds no line within the minute."""

    async def scenario() -> None:
        wal = new_log(tmp_path)
        wal.start()
        await wal.append(1, b"a" * 100, None, commits=1)  # awaits its commit: nothing to free
        size = list_segments(tmp_path)[-1].path.stat().st_size
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, hard))
            for _ in range(5):
                with pytest.raises(WalError):
                    await wal.append(1, b"b" * 100, None, commits=1)
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            await wal.append(1, b"c" * 100, None, commits=1)
            size = list_segments(tmp_path)[-1].path.stat().st_size
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, hard))
            with pytest.raises(WalError):  # full again
                await wal.append(1, b"d" * 100, None, commits=1)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
        await wal.close()

    with caplog.at_level("INFO", logger="otel_delta.wal.log"):
        asyncio.run(scenario())
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "WAL write failed" in errors[0].getMessage()
    assert [r.getMessage() for r in caplog.records if r.levelname == "INFO"] == [
        "WAL writes succeed again"
    ]


def test_a_deleted_directory_refuses_writes_and_stops_cleanly(tmp_path: Path) -> None:
    """wal.dir deleted under a running bridge (a cleanup job, a volume mix-up): writes into
    the open, unlinked segment succeeded, so Exports were acknowledged from a file no restart
    can read; the commits that released records then raised into the buffer's callback (a
    traceback in the log), and the stop ended in a traceback and exit code 1. Now a write is
    refused (retryable, /readyz says why), releases and the stop carry on, and say so."""
    directory = tmp_path / "wal"

    async def scenario() -> None:
        wal = new_log(directory, segment_bytes=200)  # one record per segment
        wal.start()
        positions = [await wal.append(1, b"a" * 100, None, commits=1) for _ in range(2)]
        assert wal.segment_count == 2
        shutil.rmtree(directory)
        with pytest.raises(WalError, match="deleted"):  # small: it fits the open segment
            await wal.append(1, b"b", None, commits=1)
        assert "is wal.dir still there?" in wal.refusing()
        wal.committed(positions)  # the first segment is released: no directory to sync
        assert wal.pending_records == 0
        await wal.close()

    asyncio.run(scenario())


def logged(directory: Path, payloads: list[bytes], **options: int) -> None:
    """Append `payloads` (none committed: all stay in the log) and close."""

    async def write() -> None:
        wal = new_log(directory, **options)
        wal.start()
        for payload in payloads:
            await wal.append(1, payload, None, commits=1)
        await wal.close()

    asyncio.run(write())


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def messages(caplog: pytest.LogCaptureFixture, level: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == level]


def test_damage_in_the_newest_segment_is_not_cut_and_the_records_after_it_are_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged record followed by valid ones is not the torn tail of a write never answered:
    the records after it were acknowledged. It was cut off as one, with all of them."""
    payloads = [f"request {i}".encode() * 3 for i in range(1, 21)]
    logged(tmp_path, payloads)
    segment = list_segments(tmp_path)[-1].path
    size = segment.stat().st_size
    fifth = sum(HEADER_BYTES + len(p) for p in payloads[:4])
    flip(segment, fifth + HEADER_BYTES + 2)  # a byte of record 5's payload
    with caplog.at_level("INFO", logger="otel_delta.wal.log"):
        wal = new_log(tmp_path)
    kept = [(i, p) for i, p in enumerate(payloads, 1) if i != 5]
    assert [(r.position, r.payload) for r in wal.replay()] == kept
    assert wal.recovered_records == 19 and wal.next_position == 21
    assert segment.stat().st_size == size  # nothing cut
    assert wal.read(6).payload == payloads[5] and wal.read(20).payload == payloads[19]
    assert messages(caplog, "WARNING") == []
    end = fifth + HEADER_BYTES + len(payloads[4]) - 1
    assert messages(caplog, "ERROR") == [
        f"WAL {segment.name} is damaged: bytes {fifth}-{end} skipped (checksum mismatch), "
        "1 record lost (position 5); 19 record(s) of the segment kept (reading on after the "
        "damage)"
    ]
    asyncio.run(wal.close())
    logged(tmp_path, [b"after the restart"])
    assert [r.position for r in new_log(tmp_path).replay()] == [i for i, _ in kept] + [21]


def test_damage_then_a_torn_tail_cuts_the_tail_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    payloads = [bytes([i]) * 40 for i in range(1, 9)]
    logged(tmp_path, payloads)
    segment = list_segments(tmp_path)[-1].path
    whole = segment.stat().st_size
    flip(segment, 2 * (HEADER_BYTES + 40) + HEADER_BYTES)  # record 3
    with open(segment, "ab") as out:
        out.write(header(Record(9, 1, bytes(100)))[:12])  # a write that died half-way
    with caplog.at_level("INFO", logger="otel_delta.wal.log"):
        wal = new_log(tmp_path)
    assert [r.position for r in wal.replay()] == [1, 2, 4, 5, 6, 7, 8]
    assert segment.stat().st_size == whole
    [torn] = messages(caplog, "WARNING")
    assert f"byte {whole}" in torn and "cutting the torn tail (12 byte(s))" in torn
    [error] = messages(caplog, "ERROR")
    assert "1 record lost (position 3)" in error and "7 record(s) of the segment kept" in error
    asyncio.run(wal.close())


def test_damage_in_an_older_segment_loses_only_the_damaged_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Damage in the middle and at the end of a segment that is not the newest: the records
    after the middle one are replayed (they were lost, with an ERROR, as the bridge went on);
    what the end lost is told by where the next segment starts."""
    logged(tmp_path, [bytes(80)] * 12, segment_bytes=400)  # 100-byte records, 4 per segment
    first, second, *_ = list_segments(tmp_path)
    assert (first.first_position, second.first_position) == (1, 5)
    flip(first.path, 100 + 1)  # record 2's magic
    with open(first.path, "r+b") as f:
        f.truncate(350)  # record 4 cut short
    with caplog.at_level("INFO", logger="otel_delta.wal.log"):
        wal = new_log(tmp_path)
    assert [r.position for r in wal.replay()] == [1, 3, *range(5, 13)]
    assert wal.read(3).position == 3
    assert first.path.stat().st_size == 350  # only the newest segment's torn tail is cut
    assert messages(caplog, "ERROR") == [
        f"WAL {first.path.name} is damaged: bytes 100-199 skipped (bad magic), 1 record lost "
        "(position 2); 2 record(s) of the segment kept (reading on after the damage)",
        f"WAL {first.path.name} is damaged: bytes 300-349 skipped (incomplete payload), 1 "
        "record lost (position 4); 2 record(s) of the segment kept",
    ]
    asyncio.run(wal.close())


def test_a_record_this_process_wrote_is_read_at_its_offset_not_by_a_scan(
    tmp_path: Path, monkeypatch
) -> None:
    """Moving a refused request to the dead letters reads its record back: a scan of its
    whole segment each time (64 MiB by default) made a table refusing every row send about
    16 requests a second there while its records filled the log. Records written by this
    process are read at their offsets; those of an earlier process (replayed at the start)
    still by a scan; every one of them whole and right, across segments."""
    from otel_delta.wal import log as log_module

    payloads = [f"request {i} ".encode() * (i % 7 + 1) for i in range(1, 61)]

    async def scenario() -> None:
        first = new_log(tmp_path, segment_bytes=1024)
        first.start()
        for payload in payloads[:30]:
            await first.append(1, payload, None, commits=1, encoding="gzip")
        await first.close()  # nothing committed: the next process replays them
        second = new_log(tmp_path, segment_bytes=1024)
        for record in list(second.replay()):
            second.expect(record.position, 1)
        second.start()
        for payload in payloads[30:]:
            await second.append(1, payload, None, commits=1, encoding="gzip")
        assert len(second._segments) > 3
        read_back(second)
        await second.close()

    scans = []
    scanning = log_module.scan

    def counted(data, first_position=None):
        scans.append(len(data))
        return scanning(data, first_position)

    def read_back(wal: WriteAheadLog) -> None:
        monkeypatch.setattr(log_module, "scan", counted)
        for position, payload in enumerate(payloads, start=1):
            scans.clear()
            record = wal.read(position)
            assert (record.position, record.payload, record.encoding) == (position, payload, "gzip")
            whole = HEADER_BYTES + len(payload)
            if position > 30:  # written by this process: one record's bytes read, no segment scan
                assert scans == [whole]
            else:
                assert scans and scans[-1] > whole

    asyncio.run(scenario())


def test_after_positions_jump_a_damaged_record_costs_that_record_only(tmp_path: Path) -> None:
    """Positions jump at the start when Delta holds later ones (a WAL directory restored from
    an older copy). The records after the jump went on in the newest segment, whose name and
    records no longer bound them, so reading past a damaged one of them took every later one
    for damage too, and the newest segment's tail was cut: acknowledged records lost. A jump
    now starts a segment of its own."""
    payloads = [f"r{i}".encode() * 4 for i in range(5)]

    async def scenario() -> None:
        wal = new_log(tmp_path)
        wal.start()
        await wal.append(1, b"before", None, commits=1)
        await wal.close()
        wal = new_log(tmp_path)
        for record in list(wal.replay()):
            wal.expect(record.position, 1)
        wal.advance_to(5_001)
        wal.start()
        for payload in payloads:
            await wal.append(1, payload, None, commits=1)
        await wal.close()

    asyncio.run(scenario())
    newest = list_segments(tmp_path)[-1].path
    data = bytearray(newest.read_bytes())
    data[HEADER_BYTES] ^= 0xFF  # the first payload byte of record 5001
    newest.write_bytes(bytes(data))
    replayed = [(r.position, r.payload) for r in new_log(tmp_path).replay()]
    assert replayed == [(1, b"before"), *zip(range(5_002, 5_006), payloads[1:], strict=True)]
