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
