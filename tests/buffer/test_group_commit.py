"""Group commit semantics, with a real delta-rs writer underneath."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from otel_delta.buffer import GroupCommitBuffer
from otel_delta.buffer.group_commit import RESIDENT_READ_SECONDS
from otel_delta.convert import spans_to_arrow
from otel_delta.engines import DeltaRsEngine
from otel_delta.errors import BufferFullError, CommitError, MemoryLimitError, ShuttingDownError
from otel_delta.lakehouse import Lakehouse
from otel_delta.priority import BACKGROUND_NICENESS
from tests.helpers import read_table
from tests.test_cli import one_span_request


class RecordingWriter(DeltaRsEngine):
    """The real writer, remembering how many rows each commit held."""

    def __init__(self, lakehouse: Lakehouse) -> None:
        super().__init__(lakehouse)
        self.commits: list[tuple[str, int]] = []

    def append(self, table_name: str, data: pa.Table, app_transaction=None) -> int:
        version = super().append(table_name, data, app_transaction)
        self.commits.append((table_name, data.num_rows))
        return version


def spans(i: int) -> dict[str, pa.Table]:
    return spans_to_arrow(one_span_request(i)).tables


def make_buffer(writer, **overrides) -> GroupCommitBuffer:
    options = {
        "flush_interval_seconds": 0.2,
        "max_rows": 10_000,
        "max_bytes": 1 << 30,
        "retry_after_seconds": 1.0,
        **overrides,
    }
    return GroupCommitBuffer(writer, **options)


def test_concurrent_requests_share_one_commit(tmp_path: Path) -> None:
    writer = RecordingWriter(Lakehouse(str(tmp_path)))

    async def scenario() -> None:
        buffer = make_buffer(writer)
        buffer.start()
        await asyncio.gather(*(buffer.submit(spans(i)) for i in range(1, 51)))
        # every submit returned: all 50 rows are committed, in a single commit
        assert read_table(tmp_path, "spans").num_rows == 50
        await buffer.close()

    asyncio.run(scenario())
    assert writer.commits == [("spans", 50)]


def test_max_rows_commits_before_the_interval(tmp_path: Path) -> None:
    writer = RecordingWriter(Lakehouse(str(tmp_path)))

    async def scenario() -> float:
        buffer = make_buffer(writer, flush_interval_seconds=60, max_rows=10)
        buffer.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(buffer.submit(spans(i)) for i in range(1, 11)))
        elapsed = loop.time() - started
        await buffer.close()
        return elapsed

    assert asyncio.run(scenario()) < 30  # far below the 60 s interval: max_rows triggered it
    assert writer.commits[0] == ("spans", 10)


def test_memory_limit_refuses_new_rows(tmp_path: Path) -> None:
    writer = RecordingWriter(Lakehouse(str(tmp_path)))

    async def scenario() -> None:
        buffer = make_buffer(writer, max_bytes=1, flush_interval_seconds=0.2)
        buffer.start()
        first = asyncio.create_task(buffer.submit(spans(1)))
        await asyncio.sleep(0)  # first is buffered and waiting
        assert buffer.buffered_bytes > 0
        with pytest.raises(BufferFullError) as err:
            await buffer.submit(spans(2))
        assert err.value.retry_after_seconds == 1.0
        await first
        assert buffer.buffered_bytes == 0  # released once committed
        await buffer.submit(spans(3))
        await buffer.close()

    asyncio.run(scenario())
    assert sorted(read_table(tmp_path, "spans")["name"].to_pylist()) == ["s1", "s3"]


def test_resident_memory_at_its_limit_holds_requests_back_but_never_one_alone(
    tmp_path: Path,
) -> None:
    """`max_resident_bytes`: with rows held, a request waits while the process's RSS leaves
    it no room and gets the retryable answer after `retry_after`; it is let in as soon as
    the RSS falls, even with no commit freeing anything; alone it is always let in. The RSS
    is a number the test sets: the pytest process's own is not the bridge's."""
    writer = RecordingWriter(Lakehouse(str(tmp_path)))
    resident = [10_000]

    async def scenario() -> None:
        buffer = make_buffer(
            writer,
            retry_after_seconds=0.3,
            max_resident_bytes=1_000,
            resident=lambda: resident[0],
        )
        buffer.start()
        await buffer.submit(spans(1))  # alone: let in over the limit, and committed
        await buffer.admit(100)  # alone: let in, and held while it "converts"
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(MemoryLimitError) as refused:
            await buffer.admit(100)
        assert loop.time() - started >= 0.3  # waited out its retry delay first
        assert refused.value.retry_after_seconds == 0.3
        assert "10000 bytes resident and 100 more for this request would pass 1000" in str(
            refused.value
        )
        assert buffer.reserved_bytes == 100  # the first one's only
        with pytest.raises(MemoryLimitError):
            buffer.check_capacity(100)
        resident[0] = 950  # under the limit, but not with 100 more
        await asyncio.sleep(RESIDENT_READ_SECONDS)  # the last read no longer stands
        with pytest.raises(MemoryLimitError) as under:
            buffer.check_capacity(100)
        # it said "950 of 1000 bytes resident": refused, to an operator, while under its limit
        assert "950 bytes resident and 100 more for this request would pass 1000" in str(
            under.value
        )
        buffer.check_capacity(50)
        resident[0] = 10_000
        await asyncio.sleep(RESIDENT_READ_SECONDS)
        buffer.retry_after = 30.0  # long: a waiter let in well before it was woken by the RSS
        waiting = asyncio.create_task(buffer.admit(100))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        resident[0] = 500  # falls with no commit and no release to wake the waiter
        await asyncio.wait_for(waiting, 10)
        buffer.release(200)
        await buffer.close()

    asyncio.run(scenario())
    assert read_table(tmp_path, "spans")["name"].to_pylist() == ["s1"]


def test_rows_already_converted_are_not_refused_for_the_memory_limit(tmp_path: Path) -> None:
    """ack = "commit": a request admitted under the limit hands its rows over after its own
    reservation is let go; with another request held and the RSS now over the limit, they
    were refused there (MemoryLimitError), the conversion thrown away and no wait for room."""
    writer = RecordingWriter(Lakehouse(str(tmp_path)))

    async def scenario() -> None:
        buffer = make_buffer(writer, max_resident_bytes=1_000, resident=lambda: 10_000)
        buffer.start()
        await buffer.admit(100)  # another request, alone when admitted, converting still
        await buffer.submit(spans(1))
        buffer.release(100)
        await buffer.close()

    asyncio.run(scenario())
    assert read_table(tmp_path, "spans")["name"].to_pylist() == ["s1"]


def test_no_resident_limit_never_reads_the_resident_memory(tmp_path: Path) -> None:
    def unreadable() -> int:
        raise AssertionError("read without a limit")

    async def scenario() -> None:
        buffer = make_buffer(RecordingWriter(Lakehouse(str(tmp_path))), resident=unreadable)
        buffer.start()
        await buffer.submit(spans(1))
        await buffer.admit(100)
        buffer.release(100)
        await buffer.close()

    asyncio.run(scenario())


class WidthRecordingWriter(RecordingWriter):
    """The real writer, remembering whether each commit was told to spread over every core."""

    def __init__(self, lakehouse: Lakehouse) -> None:
        super().__init__(lakehouse)
        self.wide = False
        self.widths: list[bool] = []

    def spread(self, wide: bool) -> None:
        super().spread(wide)
        self.wide = wide

    def append(self, table_name: str, data: pa.Table, app_transaction=None) -> int:
        self.widths.append(self.wide)
        return super().append(table_name, data, app_transaction)


def test_a_commit_spreads_over_every_core_only_while_everything_waits_for_it(
    tmp_path: Path,
) -> None:
    writer = WidthRecordingWriter(Lakehouse(str(tmp_path)))

    async def scenario() -> None:
        buffer = make_buffer(writer, max_bytes=1, flush_interval_seconds=600)
        buffer.start()
        first = asyncio.create_task(buffer.submit(spans(1)))
        await asyncio.sleep(0)
        await buffer.flush()  # nobody waits for room: the commit keeps to its thread
        await first
        second = asyncio.create_task(buffer.submit(spans(2)))
        await asyncio.sleep(0)  # buffered: the buffer is full
        await buffer.admit(100)  # waits for the commit, which spreads
        buffer.release(100)
        await second
        third = asyncio.create_task(buffer.submit(spans(3)))
        await asyncio.sleep(0)
        await buffer.close()  # the last commit spreads: nothing else is left to do
        await third

    asyncio.run(scenario())
    assert writer.widths == [False, True, True]
    assert read_table(tmp_path, "spans").num_rows == 3


def niceness_of_each_file(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Filled with the niceness of the thread that encodes each Parquet file written."""
    seen: list[int] = []

    class Recording(pq.ParquetWriter):
        def write_table(self, table: pa.Table, row_group_size: int | None = None) -> None:
            seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            super().write_table(table, row_group_size)

    monkeypatch.setattr(pq, "ParquetWriter", Recording)
    return seen


def test_files_are_encoded_below_the_exports_only_while_the_buffer_has_room_to_spare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    niceness = niceness_of_each_file(monkeypatch)
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    async def scenario() -> None:
        buffer = make_buffer(RecordingWriter(Lakehouse(str(tmp_path))), flush_interval_seconds=600)
        buffer.start()
        first = asyncio.create_task(buffer.submit(spans(1)))
        await asyncio.sleep(0)
        await buffer.flush()  # one row of a GiB: room to spare, the file is encoded niced
        await first
        buffer.max_bytes = 1  # the next row fills the buffer past its half
        second = asyncio.create_task(buffer.submit(spans(2)))
        await asyncio.sleep(0)
        await buffer.flush()
        await second
        buffer.max_bytes = 1 << 30
        third = asyncio.create_task(buffer.submit(spans(3)))
        await asyncio.sleep(0)
        await buffer.close()  # the last commit: nothing else is left to do
        await third

    asyncio.run(scenario())
    assert niceness == [min(19, ours + BACKGROUND_NICENESS), ours, ours]
    # the thread that made the buffer and answered its senders keeps its priority
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == ours
    assert read_table(tmp_path, "spans").num_rows == 3


def test_failed_commit_fails_every_waiter(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    writer = DeltaRsEngine(Lakehouse(str(blocker)), transient_retries=0)

    async def scenario() -> list:
        buffer = make_buffer(writer)
        buffer.start()
        results = await asyncio.gather(
            *(buffer.submit(spans(i)) for i in range(1, 4)), return_exceptions=True
        )
        await buffer.close()
        return results

    results = asyncio.run(scenario())
    assert all(isinstance(r, CommitError) for r in results)


def test_close_commits_everything_then_refuses(tmp_path: Path) -> None:
    writer = RecordingWriter(Lakehouse(str(tmp_path)))

    async def scenario() -> None:
        buffer = make_buffer(writer, flush_interval_seconds=600)
        buffer.start()
        waiting = [asyncio.create_task(buffer.submit(spans(i))) for i in range(1, 6)]
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in waiting)
        await buffer.close()
        await asyncio.gather(*waiting)
        with pytest.raises(ShuttingDownError):
            await buffer.submit(spans(9))

    asyncio.run(scenario())
    assert read_table(tmp_path, "spans").num_rows == 5


def rows_request(first: int, count: int) -> dict[str, pa.Table]:
    return {"spans": pa.concat_tables([spans(i)["spans"] for i in range(first, first + count)])}


def test_no_commit_holds_more_than_max_rows(tmp_path: Path) -> None:
    """max_rows caps every commit (so `auto` cannot route live ingestion to Spark by size):
    groups that would outgrow it are sealed, and one request larger than it is sliced."""
    writer = RecordingWriter(Lakehouse(str(tmp_path)))

    async def scenario() -> None:
        buffer = make_buffer(writer, flush_interval_seconds=60, max_rows=10)
        buffer.start()
        await asyncio.gather(
            buffer.submit(rows_request(1, 6)),
            buffer.submit(rows_request(7, 6)),  # 12 > 10: the first group is sealed at 6
            buffer.submit(rows_request(13, 25)),  # alone over the cap: 10 + 10 + 5
        )
        await buffer.close()
        assert buffer.stats.commits == len(writer.commits)
        assert buffer.stats.rows == 37

    asyncio.run(scenario())
    assert max(rows for _, rows in writer.commits) <= 10
    assert sum(rows for _, rows in writer.commits) == 37
    assert sorted(rows for _, rows in writer.commits) == [5, 6, 6, 10, 10]
    assert read_table(tmp_path, "spans").num_rows == 37


def test_wal_mode_retries_a_failed_table_in_order_and_commits_each_record_once(
    tmp_path: Path,
) -> None:
    """ack = "wal": nobody waits, so a failed commit is kept and retried with backoff; the
    groups behind it wait (a transaction version means "every record up to here"), and once
    the table can be written every record is committed exactly once and released."""
    blocker = tmp_path / "spans"
    blocker.write_text("a file where the table should be")  # injected: commits fail
    released: list[int] = []
    writer = RecordingWriter(Lakehouse(str(tmp_path)))
    writer.transient_retries = 0  # the buffer's own retry is what is under test

    async def scenario() -> None:
        buffer = make_buffer(writer, flush_interval_seconds=0.05, max_rows=2, app_id="test-wal")
        buffer.on_committed = released.extend
        buffer.start()
        for position in range(1, 6):
            buffer.add(spans(position), position)
        await asyncio.sleep(0.5)
        assert buffer.stats.failures >= 1 and released == []
        assert buffer.buffered_bytes > 0  # kept, not dropped
        blocker.unlink()  # the storage recovers
        deadline = asyncio.get_running_loop().time() + 20
        while len(released) < 5 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        await buffer.close()

    asyncio.run(scenario())
    assert released == [1, 2, 3, 4, 5]  # in log order
    assert [rows for _, rows in writer.commits] == [2, 2, 1]
    table = DeltaTable(str(tmp_path / "spans"))
    assert table.transaction_version("test-wal") == 5
    assert sorted(read_table(tmp_path, "spans")["name"].to_pylist()) == [
        f"s{i}" for i in range(1, 6)
    ]


class FirstCommitHangsWriter(RecordingWriter):
    """The real writer; its first append waits for `go` (a store that hangs) and then runs,
    after which `after_first` is called (the test changes the storage there)."""

    def __init__(self, lakehouse: Lakehouse, after_first) -> None:
        super().__init__(lakehouse)
        self.started, self.go = threading.Event(), threading.Event()
        self.after_first = after_first
        self.calls = 0

    def append(self, table_name: str, data: pa.Table, app_transaction=None) -> int:
        self.calls += 1
        if self.calls > 1:
            return super().append(table_name, data, app_transaction)
        self.started.set()
        self.go.wait(30)
        try:
            return super().append(table_name, data, app_transaction)
        finally:
            self.after_first()


def test_a_stop_commits_no_group_after_one_it_left_in_the_wal(tmp_path: Path) -> None:
    """A commit in flight when the stop begins fails (the store is down), so its records stay
    in the WAL; the store is back for the stop's own flush. The groups behind the failed one
    must stay in the WAL too: committed, their transaction version would tell the next start's
    replay that the failed group's records are in the table, and they would be skipped."""
    blocker = tmp_path / "spans"
    blocker.write_text("a file where the table should be")  # injected: commits fail
    released: list[int] = []
    writer = FirstCommitHangsWriter(Lakehouse(str(tmp_path)), after_first=blocker.unlink)
    writer.transient_retries = 0

    async def scenario() -> None:
        buffer = make_buffer(writer, flush_interval_seconds=0.05, app_id="test-wal")
        buffer.on_committed = released.extend
        buffer.start()
        buffer.add(spans(1), 1)
        buffer.add(spans(2), 2)
        await asyncio.to_thread(writer.started.wait, 30)  # records 1 and 2: their commit hangs
        buffer.add(spans(3), 3)  # a group behind it
        closing = asyncio.create_task(buffer.close())
        await asyncio.sleep(0.2)  # the stop has begun
        writer.go.set()  # the hung commit fails; the store is back
        await closing

    asyncio.run(scenario())
    assert released == []  # 1 and 2 failed; 3 waits behind them: every record stays logged
    table = DeltaTable(str(tmp_path / "spans")) if (tmp_path / "spans").is_dir() else None
    assert table is None or table.transaction_version("test-wal") is None


def test_memory_limit_counts_what_the_rows_hold(tmp_path: Path) -> None:
    """`held` (a converter's figure for the memory behind a table) is counted when it is more
    than the table's buffer lengths, and never less than those lengths."""
    writer = RecordingWriter(Lakehouse(str(tmp_path)))
    one = spans(1)["spans"].get_total_buffer_size()

    async def scenario() -> None:
        buffer = make_buffer(writer, max_bytes=one * 10, flush_interval_seconds=60)
        buffer.start()
        first = asyncio.create_task(buffer.submit(spans(1), held={"spans": one * 10}))
        await asyncio.sleep(0)
        assert buffer.buffered_bytes == one * 10
        with pytest.raises(BufferFullError):
            await buffer.submit(spans(2))
        await buffer.flush()
        await first
        assert buffer.buffered_bytes == 0
        third = asyncio.create_task(buffer.submit(spans(3), held={"spans": 1}))
        await asyncio.sleep(0)
        assert buffer.buffered_bytes == spans(3)["spans"].get_total_buffer_size()  # not 1
        await buffer.close()
        await third

    asyncio.run(scenario())
    assert sorted(read_table(tmp_path, "spans")["name"].to_pylist()) == ["s1", "s3"]
