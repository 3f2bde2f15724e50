from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import RunningBridge, make_settings

# markers by the real part a test needs, so that a developer can run or leave out a slow or
# heavy one (`pytest -m "spark and not s3"`): given by the test's folder, and also by the Spark
# session fixture or an engine parameter named spark, and a module named for the Collector
FOLDER_MARKERS = {
    "s3": "s3",
    "azure": "azure",
    "kafka": "kafka",
    "stream": "kafka",
    "collector": "collector",
    "spark": "spark",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        folders = item.path.relative_to(tests).parts[:-1]
        names = {FOLDER_MARKERS[f] for f in folders if f in FOLDER_MARKERS}
        if "spark" in getattr(item, "fixturenames", ()) or "spark" in item.name.lower():
            names.add("spark")
        if "stream" in folders:
            names.add("spark")  # the stream job is a Spark job
        if "collector" in item.path.name:
            names.add("collector")
        for name in sorted(names):
            item.add_marker(name)


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
