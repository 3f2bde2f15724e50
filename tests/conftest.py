from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import RunningBridge, make_settings


@pytest.fixture
def lakehouse(tmp_path: Path) -> Path:
    return tmp_path / "lakehouse"


@pytest.fixture
def bridge(lakehouse: Path):
    running = RunningBridge(make_settings(lakehouse))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run: a start costs ~10 s."""
    from otel_delta.engines.spark import size_for_local
    from otel_delta.spark.session import spark_session

    session = spark_session(master="local[2]")
    size_for_local(session)  # tuned as the connector tunes its own session
    yield session
    session.stop()
