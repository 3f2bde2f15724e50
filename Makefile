# Everything a fresh clone needs: `make run` starts the bridge, `make test` runs the test suite.
# The virtual environment lives in .venv/ and is (re)built when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
DELTA_VERSION := 4.0.1
# rustup installs cargo in ~/.cargo/bin, which a non-login shell may not have on PATH
export PATH := $(PATH):$(HOME)/.cargo/bin
NATIVE := $(VENV)/.native-installed
NATIVE_SRC := $(wildcard native/src/*.rs) $(addprefix native/,Cargo.toml Cargo.lock build.rs descriptors.py pyproject.toml)
JARS := jars/delta-spark_2.13-$(DELTA_VERSION).jar jars/delta-storage-$(DELTA_VERSION).jar
LOGSTORE_JAR := jars/otel-delta-logstore-0.1.0.jar
JARS += $(LOGSTORE_JAR)

.PHONY: setup run test quick lint bench bench-trace bench-backfill clean jars proto native

# gRPC code of our own protos/ (ConnectorService), generated, never committed
PROTOS := $(wildcard protos/*/*/*.proto)
GENERATED := otel_delta/_generated
PROTO_STAMP := $(GENERATED)/.generated

setup: $(STAMP) $(NATIVE) $(JARS) $(PROTO_STAMP)

proto: $(PROTO_STAMP)

$(PROTO_STAMP): $(PROTOS) $(STAMP)
	rm -rf $(GENERATED)
	$(VENV)/bin/python -m grpc_tools.protoc -I$(GENERATED)=protos --python_out=. \
		--grpc_python_out=. --pyi_out=. $(PROTOS)
	find $(GENERATED) -type d -exec touch {}/__init__.py \;
	touch $@

# Delta's jars for Spark, fetched once from Maven Central; Spark then starts offline.
jars: $(JARS)

# Our put-if-absent Delta LogStore for Spark (spark/logstore; see README "Commit safety").
$(LOGSTORE_JAR): spark/logstore/pom.xml $(shell find spark/logstore/src -name '*.java')
	mvn -q -f spark/logstore/pom.xml package
	mkdir -p jars
	cp spark/logstore/target/$(notdir $@) $@

jars/%.jar:
	mkdir -p jars
	mvn -q dependency:copy -Dartifact=io.delta:$(subst -$(DELTA_VERSION),,$*):$(DELTA_VERSION) -DoutputDirectory=jars

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip==26.3
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The native (Rust) converter, built with the machine's cargo into the venv; its OTLP types are
# generated from the descriptors of the venv's opentelemetry-proto package.
native: $(NATIVE)

$(NATIVE): $(STAMP) $(NATIVE_SRC)
	cd native && VIRTUAL_ENV=$(abspath $(VENV)) OTEL_DELTA_PYTHON=$(abspath $(VENV))/bin/python \
		$(abspath $(VENV))/bin/maturin develop --release --locked --quiet
	touch $@

run: setup
	$(VENV)/bin/otel-delta serve --config deltalake.toml

lint: setup
	$(VENV)/bin/ruff check otel_delta tests bench
	$(VENV)/bin/ruff format --check otel_delta tests bench

test: lint
	$(VENV)/bin/pytest

quick: setup
	$(VENV)/bin/pytest -m "not e2e"

bench: setup
	$(VENV)/bin/python -m bench.ingest

# trace lookup by id over 5M spans, before/after Z-order (a few minutes; not part of CI)
bench-trace: setup
	$(VENV)/bin/python -m bench.trace_lookup
# backfill rows/s: delta-rs path vs Spark local vs a Spark standalone cluster, same files
bench-backfill: setup
	$(VENV)/bin/python -m bench.backfill

clean:
	rm -rf $(VENV) jars spark/logstore/target *.egg-info .pytest_cache .ruff_cache $(GENERATED) native/target
