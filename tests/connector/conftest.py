"""A lakehouse written once by the real bridge; each test gets its own copy to change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from otel_delta.connector import DeltaConfig, DeltaLakeConnector
from tests import corpus
from tests.connector import data
from tests.helpers import running_bridge


@pytest.fixture(scope="session")
def bridge_lake(tmp_path_factory) -> Path:
    """Spans in 3 services x 2 days x 3 commits, plus the corpus in every table."""
    path = tmp_path_factory.mktemp("bridge") / "lakehouse"
    with running_bridge(path) as bridge:
        traces, metrics, logs = bridge.stubs(bridge.channel())
        for request in data.all_requests():
            traces.Export(request)  # each answer waits for its commit: one commit each
        traces.Export(corpus.trace_request())
        metrics.Export(corpus.metrics_request())
        logs.Export(corpus.logs_request())
    return path


@pytest.fixture
def lake_path(bridge_lake: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "lakehouse"
    shutil.copytree(bridge_lake, copy)
    return copy


@pytest.fixture
def lake(lake_path: Path) -> DeltaLakeConnector:
    return DeltaLakeConnector(DeltaConfig.for_path(lake_path))


@pytest.fixture
def spans(lake: DeltaLakeConnector):
    return lake.table("spans")
