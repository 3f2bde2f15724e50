"""Arrow IPC (`otel_delta/ipc.py`): every table that crosses a process boundary or waits on
disk comes back as it went."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from otel_delta.ipc import from_ipc, ipc_stream, read_spill, spill_writer, to_ipc


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "n": pa.array(range(start, start + n), pa.int64()),
            "service": pa.array(["checkout"] * n).dictionary_encode(),
            "attributes": pa.array(
                [[("k", str(i))] for i in range(n)], pa.map_(pa.string(), pa.string())
            ),
        }
    )


def test_one_table_round_trips_with_its_types() -> None:
    table = _rows(100)
    back = from_ipc(to_ipc(table))
    assert back.schema == table.schema
    assert back.equals(table)


def test_from_ipc_reads_an_arrow_buffer_as_well_as_bytes() -> None:
    table = _rows(3)
    assert from_ipc(pa.py_buffer(to_ipc(table))).equals(table)


def test_a_stream_written_a_batch_at_a_time_is_one_ipc_stream() -> None:
    batches = [_rows(10, start).to_batches()[0] for start in (0, 10, 20)]
    data = b"".join(ipc_stream(batches[0].schema, batches))
    assert from_ipc(data).equals(pa.Table.from_batches(batches))


def test_a_stream_of_batches_whose_dictionaries_differ_reads_back_each_value() -> None:
    schema = pa.schema([("service", pa.dictionary(pa.int32(), pa.string()))])
    batches = [
        pa.record_batch([pa.array(names).dictionary_encode()], schema=schema)
        for names in (["a", "b", "a"], ["c"], ["b", "d"])
    ]
    back = from_ipc(b"".join(ipc_stream(schema, batches)))
    assert back.column("service").to_pylist() == ["a", "b", "a", "c", "b", "d"]


def test_an_empty_stream_has_the_schema_and_no_rows() -> None:
    schema = _rows(1).schema
    back = from_ipc(b"".join(ipc_stream(schema, [])))
    assert back.schema == schema
    assert back.num_rows == 0


def test_a_spill_file_gives_back_every_table_written_to_it_in_order(tmp_path: Path) -> None:
    path = tmp_path / "00000.arrow"
    parts = [_rows(1000, start) for start in (0, 1000, 2000)]
    writer = spill_writer(path, parts[0].schema)
    for part in parts:
        writer.write_table(part)
    writer.close()
    back = read_spill(path)
    assert back.equals(pa.concat_tables(parts))


def test_a_spill_file_is_compressed(tmp_path: Path) -> None:
    path = tmp_path / "00000.arrow"
    table = pa.table({"n": pa.array([7] * 100_000, pa.int64())})
    with spill_writer(path, table.schema) as writer:
        writer.write_table(table)
    assert path.stat().st_size < table.nbytes / 10
    assert read_spill(path).equals(table)
