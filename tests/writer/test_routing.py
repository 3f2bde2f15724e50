"""The routing writer sends bulk appends to Spark and the rest to delta-rs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from otel_delta.bridge import build_writer
from otel_delta.config import Settings
from otel_delta.writer.delta_rs import DeltaRsWriter
from otel_delta.writer.routing import RoutingWriter
from otel_delta.writer.spark import SparkWriter
from tests import corpus
from tests.writer.test_spark import corpus_tables


def settings(root: Path, engine: str = "auto", threshold: int = 10) -> Settings:
    return Settings(
        deltalake={
            "table_path": str(root),
            "operations": {"engine": engine, "bulk_threshold_rows": threshold},
        }
    )


def engine_of_last_commit(path: Path) -> str:
    info = DeltaTable(str(path)).history(1)[0]
    return "spark" if "Apache-Spark" in str(info.get("engineInfo", "")) else "delta-rs"


def test_delta_rs_engine_builds_no_spark_writer(tmp_path: Path) -> None:
    assert isinstance(build_writer(settings(tmp_path, "delta-rs")), DeltaRsWriter)


def test_auto_keeps_small_appends_on_delta_rs_without_starting_spark(tmp_path: Path) -> None:
    writer = build_writer(settings(tmp_path, threshold=1000))
    assert isinstance(writer, RoutingWriter) and isinstance(writer.bulk, SparkWriter)
    writer.append("logs", corpus_tables()["logs"])
    assert not writer.bulk.started  # no JVM for small appends
    assert engine_of_last_commit(tmp_path / "logs") == "delta-rs"


@pytest.mark.e2e
def test_auto_sends_bulk_appends_to_spark(tmp_path: Path, spark) -> None:
    writer = build_writer(settings(tmp_path, threshold=10))
    assert isinstance(writer, RoutingWriter)
    writer.bulk._session_factory = lambda: spark  # the shared test session (same config)
    small = corpus_tables()["logs"].slice(0, 5)
    big = pa.concat_tables([corpus_tables()["logs"]] * 2)
    assert big.num_rows >= 10 > small.num_rows
    writer.append("logs", small)
    assert engine_of_last_commit(tmp_path / "logs") == "delta-rs"
    writer.append("logs", big)
    assert engine_of_last_commit(tmp_path / "logs") == "spark"
    assert DeltaTable(str(tmp_path / "logs")).to_pyarrow_table().num_rows == 5 + big.num_rows
    assert corpus.T0  # corpus rows carry the exact ns times used by both engines
