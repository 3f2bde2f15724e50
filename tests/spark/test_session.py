from pathlib import Path

import pytest

from otel_delta.errors import SparkSetupError
from otel_delta.spark.session import LOGSTORE_CLASS, LOGSTORE_JAR, delta_jars


def test_missing_jars_name_the_command_that_fetches_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_DELTA_JARS", str(tmp_path))
    with pytest.raises(SparkSetupError) as err:
        delta_jars()
    message = str(err.value)
    assert "delta-spark_2.13-4.0.1.jar" in message and "make jars" in message
    assert "\n" not in message


def test_logstore_jar_name_matches_the_maven_build() -> None:
    """session.py and the Makefile name the jar spark/logstore/pom.xml builds."""
    import re

    root = Path(__file__).resolve().parents[2]
    pom = (root / "spark" / "logstore" / "pom.xml").read_text()
    artifact = re.search(r"<artifactId>(otel-delta-logstore)</artifactId>", pom)[1]
    version = re.search(r"<artifactId>otel-delta-logstore</artifactId>\s*<version>([^<]+)<", pom)[1]
    assert f"{artifact}-{version}.jar" == LOGSTORE_JAR
    assert f"jars/{LOGSTORE_JAR}" in (root / "Makefile").read_text()
    source = root / "spark/logstore/src/main/java" / (LOGSTORE_CLASS.replace(".", "/") + ".java")
    assert source.is_file()
