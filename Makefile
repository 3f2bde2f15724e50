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
S3A_JARS := jars/s3a/.copied
JARS += $(S3A_JARS)
KAFKA_JARS := jars/kafka/.copied
JARS += $(KAFKA_JARS)

.PHONY: setup run test quick lint bench bench-trace bench-backfill clean jars proto native collector loadgen
.PHONY: collector-kafka
.PHONY: s3-server azure-server kafka js-sdk java-sdk

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

# Spark's S3A for s3:// tables: hadoop-aws and the AWS SDK parts it needs (spark/s3a/pom.xml),
# without what pyspark already ships.
$(S3A_JARS): spark/s3a/pom.xml
	rm -rf jars/s3a
	mvn -q -f spark/s3a/pom.xml dependency:copy-dependencies -DoutputDirectory=$(abspath jars/s3a) \
		-DexcludeGroupIds=io.netty,org.slf4j,commons-logging,commons-codec,org.apache.httpcomponents
	touch $@

# Spark's Kafka source and sink (format("kafka")) for `otel-delta stream`: spark-sql-kafka-0-10,
# kafka-clients and the two small parts they need (spark/kafka/pom.xml, which lists exactly the
# jars that pyspark lacks).
$(KAFKA_JARS): spark/kafka/pom.xml
	rm -rf jars/kafka
	mvn -q -f spark/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=$(abspath jars/kafka)
	touch $@

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

# An OpenTelemetry Collector (built by the Collector Builder, ocb, from tools/otelcol/builder.yaml)
# and telemetrygen, from the Go module proxy, cached outside the clone so that fresh clones reuse
# them; tests/tools.py finds them at the same paths. The collector's folder is named by a hash of
# the manifest, not by its mtime (new in every clone). Each is built in a temp folder and moved into
# place, so that an interrupted build leaves nothing that looks done.
OTELCOL_VERSION := 0.161.0
TOOLS_CACHE ?= $(or $(OTEL_DELTA_TOOLS_CACHE),$(HOME)/.cache/otel-delta)
export OTEL_DELTA_TOOLS_CACHE := $(TOOLS_CACHE)
OTELCOL_MANIFEST := tools/otelcol/builder.yaml
OTELCOL_HASH := $(shell sha256sum $(OTELCOL_MANIFEST) 2>/dev/null | cut -c1-12)
OTELCOL := $(TOOLS_CACHE)/otelcol-$(OTELCOL_VERSION)-$(OTELCOL_HASH)/otelcol-otel-delta
TELEMETRYGEN := $(TOOLS_CACHE)/telemetrygen-$(OTELCOL_VERSION)/telemetrygen
OCB := $(TOOLS_CACHE)/ocb-$(OTELCOL_VERSION)/builder

collector: $(OTELCOL) $(TELEMETRYGEN)

# A second Collector, OTLP in and the contrib `kafka` exporter out, the producer of the streaming
# tests (tests/stream/); its own manifest (tools/otelcol-kafka/builder.yaml), so the Collector of
# every other test does not carry a Kafka client. One release older: the module proxy refuses
# contrib's pkg/kafka modules at 0.161.0 (403), so it is built by ocb 0.160.0, the same way.
OTELCOL_KAFKA_VERSION := 0.160.0
OTELCOL_KAFKA_MANIFEST := tools/otelcol-kafka/builder.yaml
OTELCOL_KAFKA_HASH := $(shell sha256sum $(OTELCOL_KAFKA_MANIFEST) 2>/dev/null | cut -c1-12)
OTELCOL_KAFKA := $(TOOLS_CACHE)/otelcol-kafka-$(OTELCOL_KAFKA_VERSION)-$(OTELCOL_KAFKA_HASH)/otelcol-otel-delta-kafka
OCB_KAFKA := $(TOOLS_CACHE)/ocb-$(OTELCOL_KAFKA_VERSION)/builder

collector-kafka: $(OTELCOL_KAFKA)

# A temp folder of the cache, removed however the recipe ends.
TOOLS_TMP = set -e; mkdir -p $(TOOLS_CACHE); tmp=$$(mktemp -d $(TOOLS_CACHE)/.build.XXXXXX); \
	trap 'rm -rf "$$tmp"' EXIT; trap 'exit 1' HUP INT TERM

# ocb of a version: $(OCB), $(OCB_KAFKA)
$(TOOLS_CACHE)/ocb-%/builder:
	$(TOOLS_TMP); GOBIN=$$tmp go install go.opentelemetry.io/collector/cmd/builder@v$*; \
	mkdir -p $(@D); mv $$tmp/builder $@

# TMPDIR: ocb makes an (unused) temp folder of its own at every start
$(OTELCOL): | $(OCB)
	$(TOOLS_TMP); TMPDIR=$$tmp $(OCB) --config $(OTELCOL_MANIFEST) --output-path $$tmp/dist; \
	mkdir -p $(@D); cp $(OTELCOL_MANIFEST) $(@D)/builder.yaml; mv $$tmp/dist/$(@F) $@

$(OTELCOL_KAFKA): | $(OCB_KAFKA)
	$(TOOLS_TMP); TMPDIR=$$tmp $(OCB_KAFKA) --config $(OTELCOL_KAFKA_MANIFEST) --output-path $$tmp/dist; \
	mkdir -p $(@D); cp $(OTELCOL_KAFKA_MANIFEST) $(@D)/builder.yaml; mv $$tmp/dist/$(@F) $@

$(TELEMETRYGEN):
	$(TOOLS_TMP); GOBIN=$$tmp go install \
		github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@v$(OTELCOL_VERSION); \
	mkdir -p $(@D); mv $$tmp/telemetrygen $@

# loadgen (tools/loadgen), the Collector-like gRPC client of bench/collector_load.py: requests
# gzip'd before the run, sent as they are. Built with the machine's Go into the same cache, named
# by a hash of its sources (tests/tools.py finds it there); only the bench needs it.
LOADGEN_SOURCES := tools/loadgen/go.mod tools/loadgen/go.sum tools/loadgen/main.go
LOADGEN_HASH := $(shell cat $(LOADGEN_SOURCES) 2>/dev/null | sha256sum | cut -c1-12)
LOADGEN := $(TOOLS_CACHE)/loadgen-$(LOADGEN_HASH)/loadgen

loadgen: $(LOADGEN)

$(LOADGEN):
	$(TOOLS_TMP); (cd tools/loadgen && go build -trimpath -o $$tmp/loadgen .); \
	mkdir -p $(@D); mv $$tmp/loadgen $@

# versitygw, an S3-compatible server (its posix backend: each folder is a bucket), for the tests of
# the bridge on S3 (tests/s3/); from the Go module proxy into the same cache, in the same way.
VERSITYGW_VERSION := 1.8.0
VERSITYGW := $(TOOLS_CACHE)/versitygw-$(VERSITYGW_VERSION)/versitygw

s3-server: $(VERSITYGW)

$(VERSITYGW):
	$(TOOLS_TMP); GOBIN=$$tmp go install github.com/versity/versitygw/cmd/versitygw@v$(VERSITYGW_VERSION); \
	mkdir -p $(@D); mv $$tmp/versitygw $@

# Azurite, Microsoft's Azure Storage emulator (its blob service: azurite-blob), for the tests of
# the bridge on Azure Blob Storage (tests/azure/); from the npm registry into the same cache: npm
# installs it into a temp folder of the cache, which is then moved into place whole (the links of
# node_modules/.bin are relative, so they survive the move).
AZURITE_VERSION := 3.37.0
AZURITE_DIR := $(TOOLS_CACHE)/azurite-$(AZURITE_VERSION)
AZURITE := $(AZURITE_DIR)/node_modules/.bin/azurite-blob

azure-server: $(AZURITE)

$(AZURITE):
	$(TOOLS_TMP); npm install --prefix $$tmp --no-save --no-audit --no-fund --loglevel=error \
		azurite@$(AZURITE_VERSION); \
	rm -rf $(AZURITE_DIR); mv $$tmp $(AZURITE_DIR)

# The OpenTelemetry JS SDK and its OTLP exporters (http/json, http/protobuf, grpc), the Node
# clients of tests/transports/test_js_sdk.py; from the npm registry into the same cache, the
# versions pinned in tools/otel-js/package.json, the folder named by a hash of it (as
# tests/tools.py finds it), so an edited list installs afresh.
JS_SDK_MANIFEST := tools/otel-js/package.json
JS_SDK_HASH := $(shell sha256sum $(JS_SDK_MANIFEST) 2>/dev/null | cut -c1-12)
JS_SDK_DIR := $(TOOLS_CACHE)/otel-js-$(JS_SDK_HASH)
JS_SDK := $(JS_SDK_DIR)/node_modules/@opentelemetry/sdk-trace/package.json

js-sdk: $(JS_SDK)

$(JS_SDK):
	$(TOOLS_TMP); cp $(JS_SDK_MANIFEST) $$tmp/package.json; \
	npm install --prefix $$tmp --no-audit --no-fund --loglevel=error; \
	rm -rf $(JS_SDK_DIR); mv $$tmp $(JS_SDK_DIR)

# The OpenTelemetry Java SDK and its OTLP exporters (grpc and http/protobuf over OkHttp), the Java
# client of tests/transports/test_java_sdk.py: the jars of tools/java-sdk/pom.xml from Maven
# Central, and our tools/java-sdk/Export.java compiled beside them, into the same cache, in a folder
# named by a hash of both files (as tests/tools.py finds it), so an edit builds afresh.
JAVA_SDK_SOURCES := tools/java-sdk/pom.xml tools/java-sdk/Export.java
JAVA_SDK_HASH := $(shell cat $(JAVA_SDK_SOURCES) 2>/dev/null | sha256sum | cut -c1-12)
JAVA_SDK_DIR := $(TOOLS_CACHE)/otel-java-$(JAVA_SDK_HASH)
JAVA_SDK := $(JAVA_SDK_DIR)/classes/Export.class

java-sdk: $(JAVA_SDK)

$(JAVA_SDK):
	$(TOOLS_TMP); mvn -q -f tools/java-sdk/pom.xml dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory=$$tmp/libs; \
	javac -d $$tmp/classes -cp "$$tmp/libs/*" tools/java-sdk/Export.java; \
	rm -rf $(JAVA_SDK_DIR); mv $$tmp $(JAVA_SDK_DIR)

# Apache Kafka, a broker for the tests of the Kafka source (tests/kafka/): one process that is both
# broker and controller (KRaft, no ZooKeeper), run by tests/kafka straight from the jars of
# kafka_2.13 (tools/kafka/pom.xml); from Maven Central into the same cache: Maven copies
# them into a temp folder of the cache, which is then moved into place whole. Kafka 4 needs Java 17.
KAFKA_VERSION := 4.4.0
KAFKA_DIR := $(TOOLS_CACHE)/kafka-$(KAFKA_VERSION)
KAFKA := $(KAFKA_DIR)/libs/kafka_2.13-$(KAFKA_VERSION).jar

kafka: $(KAFKA)

$(KAFKA):
	$(TOOLS_TMP); mvn -q -f tools/kafka/pom.xml dependency:copy-dependencies \
		-Dkafka.version=$(KAFKA_VERSION) -DincludeScope=runtime -DoutputDirectory=$$tmp/libs; \
	rm -rf $(KAFKA_DIR); mv $$tmp $(KAFKA_DIR)

run: setup
	$(VENV)/bin/otel-delta serve --config deltalake.toml

lint: setup
	$(VENV)/bin/ruff check otel_delta tests bench
	$(VENV)/bin/ruff format --check otel_delta tests bench

test: lint $(OTELCOL) $(OTELCOL_KAFKA) $(TELEMETRYGEN) $(VERSITYGW) $(AZURITE) $(KAFKA) $(JS_SDK) $(JAVA_SDK)
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
