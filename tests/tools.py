"""The OpenTelemetry Collector and telemetrygen binaries that `make collector` builds.

They are built from the Go module proxy into a cache outside the clone (so that a fresh clone on
the same machine reuses them) at paths that the Makefile defines; this module finds them at the
same paths. A missing binary is an error, not a skip: `make test` builds both before pytest runs,
so a test that needs one must fail loudly rather than pass without having run.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tools" / "otelcol" / "builder.yaml"


def tools_cache() -> Path:
    """The Makefile's TOOLS_CACHE, which it exports to pytest as OTEL_DELTA_TOOLS_CACHE."""
    return Path(os.environ.get("OTEL_DELTA_TOOLS_CACHE") or Path.home() / ".cache" / "otel-delta")


def _version(name: str = "OTELCOL_VERSION") -> str:
    """A version the Makefile sets (`NAME := x.y.z`), so that it is written in one place."""
    found = re.search(rf"^{name} := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    if found is None:
        raise RuntimeError(f"no `{name} := ...` line in the Makefile")
    return found[1]


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make collector` (make test does)")
    return path


def otelcol_binary() -> Path:
    """The collector built from tools/otelcol/builder.yaml; its folder is named by the version and
    by a hash of the manifest (as in the Makefile), so an edited manifest needs a new build."""
    digest = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()[:12]
    return _existing(tools_cache() / f"otelcol-{_version()}-{digest}" / "otelcol-otel-delta")


def otelcol_kafka_binary() -> Path:
    """The Collector with the contrib `kafka` exporter (`make collector-kafka`, make test does),
    from tools/otelcol-kafka/builder.yaml, found as the Makefile names it."""
    manifest = ROOT / "tools" / "otelcol-kafka" / "builder.yaml"
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()[:12]
    folder = tools_cache() / f"otelcol-kafka-{_version('OTELCOL_KAFKA_VERSION')}-{digest}"
    path = folder / "otelcol-otel-delta-kafka"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make collector-kafka` (make test does)")
    return path


def telemetrygen_binary() -> Path:
    return _existing(tools_cache() / f"telemetrygen-{_version()}" / "telemetrygen")


def loadgen_binary() -> Path:
    """tools/loadgen, the Collector-like client of bench/collector_load.py, as `make loadgen`
    builds it: in a folder named by a hash of its sources (as the Makefile names it). Only the
    bench needs it, so `make test` does not build it."""
    source = ROOT / "tools" / "loadgen"
    sources = b"".join((source / name).read_bytes() for name in ("go.mod", "go.sum", "main.go"))
    path = tools_cache() / f"loadgen-{hashlib.sha256(sources).hexdigest()[:12]}" / "loadgen"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make loadgen`")
    return path


def versitygw_binary() -> Path:
    """versitygw, the S3-compatible server of the tests on S3 (tests/s3.py), that `make s3-server`
    builds (make test does) at the Makefile's path, named by VERSITYGW_VERSION. Missing: an error
    naming the target, never a skip."""
    version = _version("VERSITYGW_VERSION")
    path = tools_cache() / f"versitygw-{version}" / "versitygw"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make s3-server` (make test does)")
    return path


def azurite_blob() -> Path:
    """azurite-blob, the Azure Blob Storage emulator of the tests on Azure (tests/azure/), that
    `make azure-server` installs from the npm registry (make test does) at the Makefile's path,
    named by AZURITE_VERSION. Missing: an error naming the target, never a skip."""
    version = _version("AZURITE_VERSION")
    path = tools_cache() / f"azurite-{version}" / "node_modules" / ".bin" / "azurite-blob"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make azure-server` (make test does)")
    return path


def kafka_libs() -> Path:
    """The jars of Apache Kafka's server (broker and controller, KRaft mode; tests/kafka/) that
    `make kafka` copies from Maven Central (make test does) into the Makefile's folder, named by
    KAFKA_VERSION. Missing: an error naming the target, never a skip."""
    version = _version("KAFKA_VERSION")
    libs = tools_cache() / f"kafka-{version}" / "libs"
    if not (libs / f"kafka_2.13-{version}.jar").is_file():
        raise FileNotFoundError(f"{libs} is missing: run `make kafka` (make test does)")
    return libs


def js_sdk_modules() -> Path:
    """The node_modules of tools/otel-js/package.json (the OpenTelemetry JS SDK and its OTLP
    exporters) that `make js-sdk` installs from the npm registry (make test does), in a folder
    named by a hash of that file, as the Makefile names it. Missing: an error naming the target,
    never a skip."""
    manifest = ROOT / "tools" / "otel-js" / "package.json"
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()[:12]
    modules = tools_cache() / f"otel-js-{digest}" / "node_modules"
    if not (modules / "@opentelemetry" / "sdk-trace" / "package.json").is_file():
        raise FileNotFoundError(f"{modules} is missing: run `make js-sdk` (make test does)")
    return modules


def java_sdk_classpath() -> str:
    """The class path of tools/java-sdk/Export.java compiled beside the OpenTelemetry Java SDK's
    jars (tools/java-sdk/pom.xml), as `make java-sdk` builds them (make test does) in a folder
    named by a hash of both files, as the Makefile names it. Missing: an error naming the
    target, never a skip."""
    source = ROOT / "tools" / "java-sdk"
    sources = b"".join((source / name).read_bytes() for name in ("pom.xml", "Export.java"))
    folder = tools_cache() / f"otel-java-{hashlib.sha256(sources).hexdigest()[:12]}"
    if not (folder / "classes" / "Export.class").is_file():
        raise FileNotFoundError(f"{folder} is missing: run `make java-sdk` (make test does)")
    return f"{folder / 'classes'}{os.pathsep}{folder / 'libs' / '*'}"
