"""The engine choice: bulk appends go to Spark, the rest to delta-rs; `engine` forces one."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from otel_delta.bridge import build_engines
from otel_delta.config import Settings
from otel_delta.engines import DeltaRsEngine, SparkEngine
from tests import corpus
from tests.engines.test_spark import corpus_tables


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


def test_delta_rs_engine_never_chooses_spark(tmp_path: Path) -> None:
    engines = build_engines(settings(tmp_path, "delta-rs", threshold=10))
    for rows in (None, 1, 10, 10**9):
        assert isinstance(engines.pick(rows), DeltaRsEngine)
    assert isinstance(engines.pick_bulk_load(), DeltaRsEngine)
    assert isinstance(engines.pick(1, "spark"), SparkEngine)  # a call may still ask for it
    assert not engines.spark.started


def test_auto_keeps_small_appends_on_delta_rs_without_starting_spark(tmp_path: Path) -> None:
    writer = build_engines(settings(tmp_path, threshold=1000))
    assert isinstance(writer.pick(999), DeltaRsEngine)
    assert isinstance(writer.pick(1000), SparkEngine)
    assert isinstance(writer.pick(None), DeltaRsEngine)  # delete, optimize, vacuum, restore
    assert isinstance(writer.pick_bulk_load(), SparkEngine)  # backfill
    writer.append("logs", corpus_tables()["logs"])
    assert not writer.spark.started  # no JVM for small appends
    assert engine_of_last_commit(tmp_path / "logs") == "delta-rs"


@pytest.mark.e2e
def test_auto_sends_bulk_appends_to_spark(tmp_path: Path, spark) -> None:
    writer = build_engines(settings(tmp_path, threshold=10))
    writer.spark._factory = lambda: spark  # the shared test session (same config)
    small = corpus_tables()["logs"].slice(0, 5)
    big = pa.concat_tables([corpus_tables()["logs"]] * 2)
    assert big.num_rows >= 10 > small.num_rows
    writer.append("logs", small)
    assert engine_of_last_commit(tmp_path / "logs") == "delta-rs"
    writer.append("logs", big)
    assert engine_of_last_commit(tmp_path / "logs") == "spark"
    assert DeltaTable(str(tmp_path / "logs")).to_pyarrow_table().num_rows == 5 + big.num_rows
    assert corpus.T0  # corpus rows carry the exact ns times used by both engines
