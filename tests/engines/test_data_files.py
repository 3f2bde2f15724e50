"""Files written by our own code (otel_delta.engines.data_files) and committed as Add actions:
what the stream's executors and compaction write. Every table of the every-field corpus, with
partition values that need escaping, read back by delta-rs and Spark."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from otel_delta.engines.data_files import (
    JOIN_CHUNKS_BELOW_ROWS,
    DataFile,
    hive_escape,
    stats_columns,
    table_filesystem,
    write_partitioned,
)
from otel_delta.lakehouse import Lakehouse
from otel_delta.tables import TABLES
from otel_delta.tables.packed import DICTIONARY_MIN_ROWS, PACKED_COLUMNS, packed_schema
from tests.engines.test_spark import canonical, corpus_tables

AWKWARD = ["web shop", "a/b", "50%", "ünï-服务", "k=v:1", "#x?*[]"]


def with_services(rows: pa.Table) -> pa.Table:
    names = pa.array([AWKWARD[i % len(AWKWARD)] for i in range(rows.num_rows)], pa.string())
    return rows.set_column(rows.schema.get_field_index("service_name"), "service_name", names)


def write_files(
    directory: Path,
    rows: pa.Table,
    name: str,
    partition_by: Sequence[str] = (),
    pool: ThreadPoolExecutor | None = None,
) -> list[DataFile]:
    """`rows` (plain or packed) written as a table `name`'s files under `directory`, by the
    bridge's writer alone (no commit)."""
    directory.mkdir(parents=True)
    filesystem = table_filesystem(str(directory), None)
    layout = TABLES[name].layout
    return write_partitioned(
        rows, rows.schema, partition_by, filesystem, layout, "ZSTD", 3, None, pool
    )


def commit(lake: Lakehouse, name: str, rows: pa.Table) -> DeltaTable:
    delta = lake.create_table(name)
    files = write_partitioned(
        rows,
        TABLES[name].schema,
        lake.partition_by,
        table_filesystem(lake.uri(name), None),
        TABLES[name].layout,
        "ZSTD",
        3,
        stats_columns(delta),
    )
    assert sum(f.rows for f in files) == rows.num_rows
    now = int(time.time() * 1000)
    delta.create_write_transaction(
        [f.add_action(now) for f in files],
        mode="append",
        schema=delta.schema(),
        partition_by=list(lake.partition_by),
    )
    return DeltaTable(lake.uri(name))


def test_hive_escape_is_what_hive_and_spark_escape() -> None:
    assert hive_escape("a/b=c:d%") == "a%2Fb%3Dc%3Ad%25"
    assert hive_escape("web shop ünï") == "web shop ünï"
    assert hive_escape("tab\there") == "tab%09here"


@pytest.mark.e2e
def test_every_table_reads_back_in_delta_rs_and_spark(tmp_path: Path, spark) -> None:
    lake = Lakehouse(str(tmp_path / "lake"))
    for name, rows in corpus_tables().items():
        rows = with_services(pa.concat_tables([rows] * 3))
        table = commit(lake, name, rows)
        assert canonical(table.to_pyarrow_table()).equals(canonical(rows)), name
        services = set(rows.column("service_name").to_pylist())
        partitions = {p["service_name"] for p in table.partitions()}
        assert partitions == services, name
        frame = spark.read.format("delta").load(lake.uri(name))
        assert frame.count() == rows.num_rows, name
        found = {r[0] for r in frame.select("service_name").distinct().collect()}
        assert found == services, name
        # a partition filter finds exactly that partition's rows
        for service in services:
            want = pc.sum(pc.equal(rows.column("service_name"), service)).as_py()
            assert frame.where(frame.service_name == service).count() == want, (name, service)


def test_statistics_equal_delta_rs_own(tmp_path: Path) -> None:
    """The log's statistics of each file written here are what delta-rs records for the same
    rows, for the columns the table keeps statistics of."""
    lake = Lakehouse(str(tmp_path / "lake"))
    commit(lake, "spans", pa.concat_tables([corpus_tables()["spans"]] * 4))
    entry = tmp_path / "lake" / "spans" / "_delta_log" / f"{1:020d}.json"
    adds = [json.loads(line)["add"] for line in entry.read_text().splitlines() if '"add"' in line]
    assert adds
    for index, add in enumerate(adds):
        ours = json.loads(add["stats"])
        rows = pq.read_table(tmp_path / "lake" / "spans" / unquote(add["path"]))
        reference = tmp_path / f"reference-{index}"
        write_deltalake(reference, rows)
        log = (reference / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
        theirs = json.loads(next(json.loads(x)["add"] for x in log if '"add"' in x)["stats"])
        assert ours["numRecords"] == theirs["numRecords"] == rows.num_rows
        for kind in ("minValues", "maxValues", "nullCount"):
            assert ours[kind], kind
            for column, value in ours[kind].items():
                assert theirs[kind][column] == value, (kind, column)
        assert {"trace_id", "start_time", "start_time_unix_nano"} <= set(ours["minValues"])


def test_files_encoded_on_a_pool_are_those_written_one_by_one(tmp_path: Path) -> None:
    """At shutdown the last commits encode their partition files on every core
    (DeltaRsEngine.spread): the same files, in the same order, as written one by one."""
    rows = with_services(pa.concat_tables([corpus_tables()["spans"]] * 4))
    partition_by = Lakehouse(str(tmp_path / "lake")).partition_by
    alone = write_files(tmp_path / "alone", rows, "spans", partition_by)
    with ThreadPoolExecutor(2) as pool:
        spread = write_files(tmp_path / "spread", rows, "spans", partition_by, pool)
    assert len(alone) == len(spread) >= len(AWKWARD)
    for one, other in zip(alone, spread, strict=True):
        assert (one.partition_values, one.rows, one.stats) == (
            other.partition_values,
            other.rows,
            other.stats,
        )
        assert pq.read_table(tmp_path / "alone" / one.path).equals(
            pq.read_table(tmp_path / "spread" / other.path)
        )


def test_packed_rows_are_written_as_their_plain_rows(tmp_path: Path) -> None:
    """Rows as the bridge buffers them (tables/packed.py: repeated columns as dictionaries, each
    request with its own) make files of the same rows, types and statistics as plain rows, with
    the packed columns dictionary-encoded."""
    for name, rows in corpus_tables().items():
        rows = pa.concat_tables([rows] * -(-DICTIONARY_MIN_ROWS // rows.num_rows))
        half = rows.num_rows // 2
        requests = [rows.slice(0, half), rows.slice(half)]
        packed = pa.concat_tables([r.cast(packed_schema(name)) for r in requests])
        assert packed.schema.equals(packed_schema(name))
        written = {}
        for form, data in (("plain", rows), ("packed", packed)):
            [file] = write_files(tmp_path / name / form, data, name)
            written[form] = (file, pq.ParquetFile(tmp_path / name / form / file.path))
        (plain_file, plain), (packed_file, packed_parquet) = written["plain"], written["packed"]
        assert packed_parquet.read().equals(plain.read()), name
        assert (packed_file.rows, packed_file.stats) == (plain_file.rows, plain_file.stats), name
        group = packed_parquet.metadata.row_group(0)
        for index in range(group.num_columns):
            column = group.column(index)
            if column.path_in_schema.split(".")[0] in PACKED_COLUMNS:
                assert "RLE_DICTIONARY" in column.encodings, (name, column.path_in_schema)


@pytest.mark.parametrize("request_rows", [JOIN_CHUNKS_BELOW_ROWS // 2, JOIN_CHUNKS_BELOW_ROWS * 2])
def test_packed_requests_with_dictionaries_of_their_own_stay_dictionary_encoded(
    tmp_path: Path, request_rows: int
) -> None:
    """Requests packed each with a dictionary of its own (values in another order), small
    (every column joined) or not (the packed columns joined): the file holds the plain rows
    with their statistics, and the packed columns are dictionary-encoded all through, where
    pyarrow's writer would write every request after the first PLAIN."""
    spec = TABLES["spans"]
    # the corpus's spans, of two services, each with resource attributes of its own
    spans = corpus_tables()["spans"].to_pylist()
    for span in spans:
        if not span["resource_attributes"]:
            span["resource_attributes"] = [("service.name", span["service_name"]), ("pod", "p-2")]
    rows = pa.Table.from_pylist(spans, schema=spec.schema)
    total = max(4 * request_rows, 2 * DICTIONARY_MIN_ROWS)  # a file of dictionaries
    rows = pa.concat_tables([rows] * -(-total // rows.num_rows))
    requests = [rows.slice(start, request_rows) for start in range(0, rows.num_rows, request_rows)]
    # every other request lists its services the other way round: its dictionaries list the
    # values in another order
    requests = [
        r.sort_by([("service_name", "descending" if i % 2 else "ascending")])
        for i, r in enumerate(requests)
    ]
    plain = pa.concat_tables(requests)
    packed = pa.concat_tables([r.cast(packed_schema("spans")) for r in requests])
    first, second = (packed["resource_attributes"].chunk(i).items.dictionary for i in (0, 1))
    assert not first.equals(second)
    written = {}
    for form, data in (("plain", plain), ("packed", packed)):
        [file] = write_files(tmp_path / form, data, "spans")
        parquet = pq.ParquetFile(tmp_path / form / file.path)
        written[form] = (file.rows, file.stats, parquet.read(), parquet.metadata.row_group(0))
    assert written["packed"][:2] == written["plain"][:2]
    assert written["packed"][2].equals(written["plain"][2])
    assert written["plain"][2].equals(plain.select(written["plain"][2].column_names))
    for index in range(written["plain"][3].num_columns):
        plain_column = written["plain"][3].column(index)
        if plain_column.path_in_schema.startswith("resource_attributes."):
            packed_column = written["packed"][3].column(index)
            assert (
                packed_column.total_uncompressed_size < plain_column.total_uncompressed_size / 4
            ), plain_column.path_in_schema


def test_small_files_of_packed_rows_are_those_of_plain_rows(tmp_path: Path) -> None:
    """Below DICTIONARY_MIN_ROWS a file takes packed columns plain: the same bytes."""
    rows = with_services(pa.concat_tables([corpus_tables()["logs"]] * 4))
    partition_by = Lakehouse(str(tmp_path / "lake")).partition_by
    written = {}
    for form, data in (("plain", rows), ("packed", rows.cast(packed_schema("logs")))):
        files = write_files(tmp_path / form, data, "logs", partition_by)
        written[form] = [(f.partition_values, f.size, f.stats) for f in files]
    assert written["packed"] == written["plain"]
