"""`deltalake.toml` and its environment overrides, validated once at start.

Precedence: environment (`OTEL_DELTA_<SECTION>__<KEY>`, e.g. `OTEL_DELTA_BUFFER__MAX_ROWS`,
`OTEL_DELTA_DELTALAKE__TABLE__COMPRESSION`) over the TOML file over the defaults below.
Any problem becomes a `ConfigError` whose message is one line naming the key.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tomllib
from pathlib import Path
from typing import Any, Literal, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from otel_delta.errors import ConfigError
from otel_delta.logstores import COMMIT_SAFETY_CONF, LOGSTORE_CLASS_KEY
from otel_delta.tables import DEFAULT_PARTITION_BY, partitionable_columns
from otel_delta.tables.layout import CODEC_LEVELS, COMPACTION_LEVEL, INGEST_LEVEL

DEFAULT_CONFIG_FILE = "deltalake.toml"
KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
HOUR = 3600.0
DAY = 24 * HOUR
# the largest gRPC message length grpc accepts (a C int)
GRPC_MAX_MESSAGE = 2**31 - 1
log = logging.getLogger(__name__)

# Keys of the connector TOML this file follows (../shared/seeds) that are accepted, validated
# and ignored, so such a file loads; setting one logs a warning that it has no effect.
COMPATIBILITY_KEYS: tuple[tuple[str, ...], ...] = (
    ("deltalake", "table", "parallelism"),
    ("deltalake", "table", "batch_size"),
    ("deltalake", "operations", "streaming_enabled"),
    ("deltalake", "schema", "strict_mode"),
    ("deltalake", "schema", "allow_nullable"),
    ("deltalake", "schema", "merge_schema"),
    ("deltalake", "storage", "file_size_max"),
)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _check_path(value: str, what: str) -> str:
    """A directory or URL that must be given: "" elsewhere in this file turns a thing off, but
    an empty path would resolve to the directory the bridge runs in and write there."""
    if not value.strip():
        raise ValueError(f"must not be empty: name {what}")
    return value


def _option_text(value: Any) -> Any:
    """A TOML (or JSON) boolean or number as the string an option holds."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    return value


def _option_texts(value: Any) -> Any:
    """A table of options passed on as strings (delta-rs's object_store options, Spark's
    conf, Kafka's client settings all take "true" and "30"): TOML's own booleans and numbers
    (`AWS_ALLOW_HTTP = true`, `"spark.sql.shuffle.partitions" = 8`, as one writes them) become
    that text instead of being refused. Tables and arrays stay errors."""
    if not isinstance(value, dict):
        return value
    return {key: _option_text(option) for key, option in value.items()}


def _check_host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT")
    return value


class TlsSettings(Section):
    """`[receiver.tls]`: TLS for both OTLP transports, like the Collector's TLS settings; and
    `[connector_service.tls]`, the same for the ConnectorService."""

    cert_file: str = ""  # PEM certificate chain; with key_file, turns TLS on
    key_file: str = ""
    client_ca_file: str = ""  # set: mTLS, clients must present a certificate signed by it
    # at a handshake, at most once per this many seconds, the files are read again and served
    # from then on if they changed and load (a rotated Kubernetes Secret); 0: read at start only
    reload_interval_seconds: float = Field(60.0, ge=0, le=DAY)

    @model_validator(mode="after")
    def _pairs(self) -> TlsSettings:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("set both cert_file and key_file, or neither")
        if self.client_ca_file and not self.cert_file:
            raise ValueError("client_ca_file (mTLS) needs cert_file and key_file")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)


# below this many characters a bearer token is said to be weak at start (not refused: a
# deployment that works keeps working); `openssl rand -hex 32` makes one of 64
WEAK_TOKEN_CHARS = 16


def _checked_strength(token: str, key: str) -> str:
    """`token`, with a WARNING (naming the setting, never the token) if it is short enough to
    guess: nothing limits how many a client may try."""
    if len(token) < WEAK_TOKEN_CHARS:
        log.warning(
            "%s: the token has %d characters; use at least %d random ones "
            "(e.g. openssl rand -hex 32): nothing limits how many tokens a client may try",
            key,
            len(token),
            WEAK_TOKEN_CHARS,
        )
    return token


class AuthSettings(Section):
    """`[receiver.auth]`: a bearer token every OTLP request must carry."""

    token_env: str = ""  # the name of the environment variable holding it; "" = no auth

    def resolved_token(self) -> str | None:
        """The token, or None without auth; an empty or unset variable is a config error."""
        if not self.token_env:
            return None
        # a token from a file or a Secret often ends in a newline, which no client can send in
        # a header: surrounding whitespace is not part of the token (as the check strips it)
        token = os.environ.get(self.token_env, "").strip()
        if not token:
            raise ConfigError(f"receiver.auth.token_env: ${self.token_env} is unset")
        return _checked_strength(token, f"receiver.auth.token_env (${self.token_env})")


class ReceiverSettings(Section):
    grpc_endpoint: str = "0.0.0.0:4317"
    http_endpoint: str = "0.0.0.0:4318"  # OTLP/HTTP; "" turns it off
    max_receive_message_bytes: int = Field(64 * MIB, gt=0, le=GRPC_MAX_MESSAGE)
    # requests received and converted at once (both transports); the rest wait unread
    max_concurrent_requests: int = Field(16, ge=1, le=10_000)
    # OTLP/HTTP: how long a request's body may take to arrive once the request has its slot;
    # a slower (or stalled) client gets 504 (retryable) and the slot goes to the requests waiting
    http_body_timeout_seconds: float = Field(30.0, gt=0, le=HOUR)
    # OTLP/gRPC: the same for an Export's request message; a client that opened the call and
    # sends nothing (no deadline) gets DEADLINE_EXCEEDED and the slot goes to the requests waiting
    grpc_message_timeout_seconds: float = Field(30.0, gt=0, le=HOUR)
    # HTTP/2 flow-control window per gRPC stream: how much of a request a client may send
    # before the bridge reads it. Fixed, not auto-tuned, so requests waiting for a slot hold
    # little memory; a stream moves at most this much per round trip, so raise it for
    # high-latency links (e.g. 4 MiB for 100 ms at 40 MB/s)
    grpc_window_bytes: int = Field(256 * KIB, ge=64 * KIB, le=64 * MIB)
    # processes that decode and convert requests; 0 = in the server process
    convert_workers: int = Field(0, ge=0, le=64)
    # the native (Rust) converter: "auto" = use it where built, "on" = required, "off" = Python
    native_convert: Literal["auto", "on", "off"] = "auto"
    tls: TlsSettings = TlsSettings()
    auth: AuthSettings = AuthSettings()

    @field_validator("grpc_endpoint")
    @classmethod
    def _host_port(cls, value: str) -> str:
        return _check_host_port(value)

    @field_validator("http_endpoint")
    @classmethod
    def _optional_host_port(cls, value: str) -> str:
        return value and _check_host_port(value)


class AdminSettings(Section):
    """`[admin]`: /healthz, /readyz and /metrics (Prometheus) over plain HTTP."""

    endpoint: str = "127.0.0.1:13133"  # "" turns it off
    # /readyz fails once commits to Delta have failed for this long without one succeeding,
    # or one commit has run this long without an answer (a store that hangs)
    commit_failure_seconds: float = Field(60.0, gt=0, le=30 * DAY)

    @field_validator("endpoint")
    @classmethod
    def _optional_host_port(cls, value: str) -> str:
        return value and _check_host_port(value)


class LoggingSettings(Section):
    """`[logging]`: how `serve` writes its log (to stderr)."""

    format: Literal["text", "json"] = "text"  # json: one object per line, for log shippers


# buffer.flush_interval_seconds with ack = "commit" when the file does not set it: each Export
# waits up to this for its commit, well inside the SDKs' and the Collector's export timeouts
COMMIT_ACK_FLUSH_SECONDS = 1.0
# `buffer.max_resident_bytes` unset: beyond the buffer, room for the bridge at rest (~150 MiB:
# Python, pyarrow, delta-rs, gRPC), requests being converted and files being encoded; with the
# encoding spikes above it, peaks stay within max_bytes + 300 MiB (docs/performance.md)
RESIDENT_HEADROOM_BYTES = 224 * MIB


class BufferSettings(Section):
    # "wal": answer an Export once its record is fsync'd in the write-ahead log (exactly-once
    # into Delta); "commit": once its rows are committed to Delta (no local disk needed)
    ack: Literal["wal", "commit"] = "wal"
    # with ack = "wal" this only sizes commits and files (bench/flush_files.py): 10 s
    flush_interval_seconds: float = Field(10.0, gt=0, le=HOUR)
    max_rows: int = Field(100_000, gt=0, le=100_000_000)
    max_bytes: int = Field(512 * MIB, gt=0, le=1024 * GIB)
    # the process's RSS at which requests wait, then get the retryable answer, as at max_bytes;
    # unset: max_bytes + RESIDENT_HEADROOM_BYTES; 0: no such limit
    max_resident_bytes: int | None = Field(None, ge=0, le=1024 * GIB)
    retry_after_seconds: float = Field(1.0, gt=0, le=HOUR)
    # a stop (SIGTERM) commits what is buffered; a store that hangs would hold it for many
    # minutes, so past this the process exits (code 1), leaving the rest in the WAL
    stop_timeout_seconds: float = Field(60.0, gt=0, le=HOUR)

    def resident_limit(self) -> int | None:
        """The RSS at which admission stops (None: none), `max_resident_bytes` resolved."""
        if self.max_resident_bytes is None:
            return self.max_bytes + RESIDENT_HEADROOM_BYTES
        return self.max_resident_bytes or None

    @model_validator(mode="before")
    @classmethod
    def _commit_ack_interval(cls, data: Any) -> Any:
        """With ack = "commit" an Export waits for the next flush: unset, the interval is then
        COMMIT_ACK_FLUSH_SECONDS, not the WAL mode's 10 s (which only sizes files there). 10 s
        is the OpenTelemetry SDKs' default export timeout (Java's, Python's; the Java meter
        provider gives its last export at shutdown 5 s): a request sent right after a flush
        waited about that long, and the SDK dropped it as failed though it was stored."""
        if (
            isinstance(data, dict)
            and data.get("ack") == "commit"
            and "flush_interval_seconds" not in data
        ):
            return {**data, "flush_interval_seconds": COMMIT_ACK_FLUSH_SECONDS}
        return data


class WalSettings(Section):
    """`[wal]`: the write-ahead log of `buffer.ack = "wal"`."""

    dir: str = "./otel-delta-wal"  # relative to where the bridge runs, like ./lakehouse
    # records awaiting commits; beyond: retry later
    max_bytes: int = Field(GIB, ge=MIB, le=1024 * 1024 * GIB)
    # a record's payload length is 32 bits; bigger segments gain nothing
    segment_bytes: int = Field(64 * MIB, ge=64 * 1024, le=4 * GIB - 1)

    @field_validator("dir")
    @classmethod
    def _given(cls, value: str) -> str:
        return _check_path(value, "a directory")

    @model_validator(mode="after")
    def _segments_fit(self) -> WalSettings:
        # the newest segment is never deleted: a log no bigger than it could never take more
        if self.segment_bytes * 2 > self.max_bytes:
            raise ValueError(
                f"segment_bytes ({self.segment_bytes}) must be at most half of max_bytes "
                f"({self.max_bytes})"
            )
        return self


Compression = Literal["UNCOMPRESSED", "SNAPPY", "GZIP", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"]


class TableSettings(Section):
    """`[deltalake.table]`: file format and table maintenance."""

    compression: Compression = "ZSTD"
    compression_level: int = Field(INGEST_LEVEL, ge=1, le=22)
    checkpoint_interval: int = Field(100, gt=0, le=1_000_000)
    optimize_enabled: bool = True
    vacuum_enabled: bool = True
    retention_hours: int = Field(168, ge=0, le=100 * 365 * 24)
    # scheduled maintenance in `serve` (0 = off); see otel_delta/maintenance
    maintenance_interval_seconds: float = Field(3600.0, ge=0, le=30 * DAY)
    # one process at a time rewrites a table's files, for this long after it last took the
    # table's lease (renewed at half); see otel_delta/engines/lease.py
    maintenance_lease_seconds: float = Field(1800.0, ge=10, le=30 * DAY)
    # drop date partitions older than this; None/0 = keep
    retention_days: int | None = Field(None, ge=0, le=100 * 365)
    checkpoint_enabled: bool = True  # checkpoint + expired-log cleanup each round
    # maintenance rewrites today's ingested files, sorted by the table's cluster key, once they
    # are this old (0 = today's partition is left to the compaction after the day closes)
    open_partition_compaction_age_seconds: float = Field(900.0, ge=0, le=30 * DAY)
    # zstd (or gzip/brotli) level of the files that compaction writes (today's partition and
    # closed days), in the codec of `compression`; unset, COMPACTION_LEVEL or the codec's highest
    compaction_compression_level: int = Field(COMPACTION_LEVEL, ge=1, le=22)
    # Delta's change data feed (delta.enableChangeDataFeed) on every telemetry table: inserts,
    # updates and deletes readable by version range (Table.changes, Spark readChangeFeed)
    change_data_feed: bool = False
    # Delta log entries (time travel) are kept this long (delta.logRetentionDuration); each
    # maintenance checkpoint removes older ones. Unset: as long as the tables' logs keep removed
    # files' tombstones (lakehouse.file_retention_hours, a week at the defaults), the age past
    # which vacuum has deleted a version's compacted files and the version cannot be read. Delta's
    # own default, 30 days, kept 259,000 entries per table at a 10 s flush (docs/performance.md)
    log_retention_hours: float | None = Field(None, ge=1, le=100 * 365 * 24)
    parallelism: int = Field(4, gt=0, le=10_000)  # compatibility only (COMPATIBILITY_KEYS)
    batch_size: int = Field(10_000, gt=0, le=100_000_000)  # compatibility only

    @model_validator(mode="before")
    @classmethod
    def _compaction_level_of_the_codec(cls, data: Any) -> Any:
        """Unset, compaction's level is COMPACTION_LEVEL within the codec's range: with
        `compression = "GZIP"` the level 15 was out of gzip's, and every compaction failed
        ("zlib deflateInit failed") while the small files piled up."""
        if not isinstance(data, dict) or "compaction_compression_level" in data:
            return data
        codec = str(data.get("compression", "ZSTD")).lower()
        if codec in CODEC_LEVELS and CODEC_LEVELS[codec][1] < COMPACTION_LEVEL:
            return {**data, "compaction_compression_level": CODEC_LEVELS[codec][1]}
        return data

    @model_validator(mode="after")
    def _levels_in_the_codec_s_range(self) -> TableSettings:
        """Each level within what the codec takes: out of range, the first write failed with
        a traceback."""
        low, high = CODEC_LEVELS.get(self.compression.lower(), (None, None))
        if low is None:
            return self
        for key in ("compression_level", "compaction_compression_level"):
            level = getattr(self, key)
            if not low <= level <= high:
                raise ValueError(
                    f"{key} = {level} is out of range for {self.compression} ({low}-{high})"
                )
        return self


class OperationsSettings(Section):
    """`[deltalake.operations]`: which connector operations are allowed, commit retries."""

    upsert_enabled: bool = True
    delete_enabled: bool = True
    bulk_insert_enabled: bool = True
    streaming_enabled: bool = True  # compatibility only (COMPATIBILITY_KEYS)
    max_commit_retries: int = Field(15, ge=0, le=1000)
    # which engine commits: "auto" sends appends of >= bulk_threshold_rows (and backfills) to
    # Spark and the rest to delta-rs; "delta-rs" / "spark" force one engine
    engine: Literal["auto", "delta-rs", "spark"] = "auto"
    bulk_threshold_rows: int = Field(500_000, gt=0, le=10**12)


class SchemaSettings(Section):
    """`[deltalake.schema]`: schema evolution policy of the connector API."""

    auto_evolution: bool = True
    # compatibility only (COMPATIBILITY_KEYS): schema changes are always additive and nullable
    strict_mode: bool = False
    allow_nullable: bool = True
    merge_schema: bool = True


class StorageSettings(Section):
    """`[deltalake.storage]`: file sizes and object-store options (passed to delta-rs)."""

    file_size_target: int = Field(128 * MIB, ge=MIB, le=64 * GIB)
    # compatibility only (COMPATIBILITY_KEYS)
    file_size_max: int = Field(256 * MIB, gt=0, le=64 * GIB)
    min_file_size: int = Field(64 * MIB, gt=0, le=64 * GIB)
    options: dict[str, str] = Field(default_factory=dict)

    _as_strings = field_validator("options", mode="before")(_option_texts)


class DeltaLakeSettings(Section):
    table_path: str = "./lakehouse"
    partition_by: list[str] = Field(default_factory=lambda: list(DEFAULT_PARTITION_BY))
    table: TableSettings = TableSettings()
    operations: OperationsSettings = OperationsSettings()
    schema_: SchemaSettings = Field(SchemaSettings(), alias="schema")
    storage: StorageSettings = StorageSettings()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("table_path")
    @classmethod
    def _given(cls, value: str) -> str:
        return _check_path(value, "a directory or a URL")

    @field_validator("partition_by")
    @classmethod
    def _known_columns(cls, value: list[str]) -> list[str]:
        allowed = partitionable_columns()
        unknown = [c for c in value if c not in allowed]
        if unknown:
            raise ValueError(f"unknown column(s) {unknown}; choose from {sorted(allowed)}")
        if len(set(value)) != len(value):
            raise ValueError(f"duplicate column in {value}")
        return value

    def resolved_table_path(self) -> str:
        """Local paths become absolute (so the log line and tables agree); URLs stay as given."""
        if "://" in self.table_path:
            return self.table_path
        return str(Path(self.table_path).expanduser().resolve())


class ConnectorServiceSettings(Section):
    """`[connector_service]`: the remote ConnectorService (gRPC), off unless enabled."""

    enabled: bool = False
    endpoint: str = "127.0.0.1:4320"
    token: str | None = None  # bearer token callers must send; or name a variable:
    token_env: str | None = None
    # unset: plain gRPC, and the token and every result cross the network in clear, so an
    # endpoint off this host wants TLS (the OTLP receiver's is its own: `receiver.tls`)
    tls: TlsSettings = TlsSettings()

    @field_validator("endpoint")
    @classmethod
    def _host_port(cls, value: str) -> str:
        return _check_host_port(value)

    def resolved_token(self) -> str:
        """The bearer token; a service without one would be open to anyone, so it is required."""
        if self.token and self.token.strip():
            return _checked_strength(self.token.strip(), "connector_service.token")
        if self.token_env:
            value = os.environ.get(self.token_env, "").strip()  # as receiver.auth's token
            if value:
                return _checked_strength(value, f"connector_service.token_env (${self.token_env})")
            raise ConfigError(f"connector_service.token_env: ${self.token_env} is unset")
        raise ConfigError("connector_service: set token or token_env when enabled")


class PrivacySettings(Section):
    """`[privacy]`: the key of the keyed hashes that hard deletes and redactions write (audit
    records, hashed values), so that no erased value is kept in clear."""

    # the name of the environment variable holding the key (never the key itself)
    hash_key_env: str = Field("OTEL_DELTA_HASH_KEY", min_length=1)

    def resolved_key(self) -> bytes:
        """The key's bytes; an unset or empty variable is a config error (never an unkeyed
        hash: an unkeyed hash of an email address is one dictionary lookup from the address)."""
        key = os.environ.get(self.hash_key_env, "")
        if not key:
            raise ConfigError(
                f"privacy.hash_key_env: ${self.hash_key_env} is unset; hard "
                "deletes and redactions need a secret key for their keyed hashes"
            )
        return key.encode()


# what a Spark master may begin with besides "yarn" (Spark 4's SparkSubmit)
SPARK_MASTER_PREFIXES = ("local", "spark://", "k8s://")


class SparkSettings(Section):
    """`[spark]`: the SparkSession used for bulk writes, backfill and reading."""

    master: str = "local[*]"  # e.g. "spark://host:7077" for a standalone cluster
    app_name: str = "otel-delta"
    ui_enabled: bool = False
    conf: dict[str, str] = Field(default_factory=dict)  # extra spark.* settings

    _as_strings = field_validator("conf", mode="before")(_option_texts)

    @field_validator("master")
    @classmethod
    def _a_master_spark_takes(cls, master: str) -> str:
        """Spark's own rule (SparkSubmit): a typo surfaced as a Java stack trace and
        JAVA_GATEWAY_EXITED, on the default engine's path."""
        if master.strip() != "yarn" and not master.strip().startswith(SPARK_MASTER_PREFIXES):
            raise ValueError(
                f"{master!r} is no Spark master: use local[N], spark://HOST:PORT, k8s://URL or yarn"
            )
        return master.strip()

    @field_validator("conf")
    @classmethod
    def _keeps_commits_safe(cls, conf: dict[str, str]) -> dict[str, str]:
        """Another log store would let Spark's commits replace delta-rs's (README: commit
        safety): refused at load rather than overridden without a word."""
        for key, ours in COMMIT_SAFETY_CONF.items():
            if key in conf and conf[key] != ours:
                raise ValueError(
                    f"{key} must be {ours} (otel-delta sets it: another store lets Spark "
                    "replace delta-rs's commits); remove it"
                )
        if LOGSTORE_CLASS_KEY in conf:
            raise ValueError(
                f"{LOGSTORE_CLASS_KEY} cannot be set (otel-delta sets each scheme's store: "
                "another store lets Spark replace delta-rs's commits); remove it"
            )
        return conf


class StreamSettings(Section):
    """`[stream]`: `otel-delta stream`, the Spark Structured Streaming job from Kafka (topics the
    Collector's `kafka` exporter writes with `encoding: otlp_proto`) into the same tables."""

    bootstrap_servers: str = ""  # e.g. "kafka-1:9092,kafka-2:9092"; required by the command
    # the Collector kafka exporter's default topics; "" = that signal is not read
    traces_topic: str = "otlp_spans"
    metrics_topic: str = "otlp_metrics"
    logs_topic: str = "otlp_logs"
    # where a stream without a checkpoint starts (a checkpoint always resumes where it was)
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    trigger_interval_seconds: float = Field(10.0, gt=0, le=DAY)
    max_offsets_per_trigger: int | None = Field(None, gt=0, le=10**12)  # None: no limit
    # /readyz fails when Spark has reported no progress (not even an idle trigger) this long:
    # a batch stuck on unreachable storage or Kafka, which the lag figures cannot show
    stall_seconds: float = Field(600.0, gt=0, le=DAY)
    checkpoint_location: str = ""  # "" = <table_path>/_stream_checkpoints
    # passed to the Kafka source as `kafka.<key>` (security.protocol, sasl.*, ssl.*)
    kafka_options: dict[str, str] = Field(default_factory=dict)
    _as_strings = field_validator("kafka_options", mode="before")(_option_texts)
    # the job's /healthz, /readyz and /metrics (lag, rows, batches); "" turns it off. Not the
    # bridge's [admin] endpoint, so a bridge and a stream can run on one host from one file.
    admin_endpoint: str = "127.0.0.1:13134"

    @field_validator("admin_endpoint")
    @classmethod
    def _optional_host_port(cls, value: str) -> str:
        return value and _check_host_port(value)

    def topics(self) -> dict[str, str]:
        """topic → signal name, for the topics that are read."""
        pairs = (
            (self.traces_topic, "traces"),
            (self.metrics_topic, "metrics"),
            (self.logs_topic, "logs"),
        )
        return {topic: signal for topic, signal in pairs if topic}

    @model_validator(mode="after")
    def _distinct_topics(self) -> StreamSettings:
        named = [t for t in (self.traces_topic, self.metrics_topic, self.logs_topic) if t]
        if len(set(named)) != len(named):
            raise ValueError("traces_topic, metrics_topic and logs_topic must differ")
        return self


class Settings(BaseSettings):
    receiver: ReceiverSettings = ReceiverSettings()
    buffer: BufferSettings = BufferSettings()
    wal: WalSettings = WalSettings()
    deltalake: DeltaLakeSettings = DeltaLakeSettings()
    connector_service: ConnectorServiceSettings = ConnectorServiceSettings()
    spark: SparkSettings = SparkSettings()
    stream: StreamSettings = StreamSettings()
    privacy: PrivacySettings = PrivacySettings()
    admin: AdminSettings = AdminSettings()
    logging: LoggingSettings = LoggingSettings()

    model_config = SettingsConfigDict(
        env_prefix="OTEL_DELTA_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))


# keys whose values may be credentials (a token; object-store, Spark and Kafka options hold
# keys, secrets and passwords): a config error names them and what they expect, but never
# echoes what they hold, since that line goes to terminals, CI logs and log collectors
SECRET_KEYS = (
    "connector_service.token",
    "deltalake.storage.options",
    "spark.conf",
    "stream.kafka_options",
)


def _secret(key: str) -> bool:
    return any(key == secret or key.startswith(secret + ".") for secret in SECRET_KEYS)


def invalid_settings(exc: ValidationError, file: Path | None = None) -> ConfigError:
    """One line for settings that do not validate: the first error, naming its key (and, for
    settings read from `file`, where it could have come from)."""
    first = _describe(exc.errors()[0], file)
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return ConfigError(f"{first}{more}")


def _describe(error: dict[str, Any], file: Path | None) -> str:
    parts = ["schema" if p == "schema_" else str(p) for p in error["loc"]]
    key = ".".join(parts)
    env = "OTEL_DELTA_" + "__".join(parts).upper()
    where = key if file is None else f"{key} ({file} or ${env})"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        return f"{key}: unknown key" + ("" if file is None else f" (in {file} or ${env})")
    if "input" in error and not isinstance(error["input"], dict | list) and not _secret(key):
        return f"{where}: {message} (got {error['input']!r})"
    return f"{where}: {message}"


# what a variable holding a list, a table or a whole section looks like, for the error line
JSON_EXAMPLES = {
    "deltalake.partition_by": '["service_name","date"]',
    "deltalake.storage.options": '{"AWS_REGION":"eu-west-1","AWS_ALLOW_HTTP":"true"}',
}


def _env_annotation(parts: list[str]) -> Any:
    """The type of the key an environment variable sets (its name split at "__", after the
    prefix), or None if it names no key or a key inside a table (a plain string)."""
    model: type[BaseModel] = Settings
    annotation: Any = None
    for index, part in enumerate(parts):
        fields = {f.alias or name: f for name, f in model.model_fields.items()}
        if part not in fields:
            return None
        annotation = fields[part].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif index < len(parts) - 1:
            return None
    return annotation


def _not_json_variable() -> str | None:
    """The line for an environment variable that must hold JSON and does not.

    pydantic-settings reads a variable for a list, a table or a whole section as JSON, and
    reports one that is not JSON only as 'error parsing value for field "deltalake" from
    source "EnvSettingsSource"', naming neither the variable nor what it should hold."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    for variable, value in os.environ.items():
        if not variable.upper().startswith(prefix.upper()):
            continue
        parts = variable[len(prefix) :].lower().split("__")
        annotation = _env_annotation(parts)
        origin = get_origin(annotation)
        section = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        if origin not in (list, dict) and not section:
            continue
        try:
            json.loads(value)
        except ValueError as exc:
            key = ".".join(parts)
            example = JSON_EXAMPLES.get(key, '["value"]' if origin is list else '{"key":"value"}')
            # a table or a section may hold credentials (storage options): not echoed
            got = f"got {value!r}" if origin is list else "not JSON"
            return f"{key} (${variable}): expected a JSON value, e.g. {example} ({got}: {exc})"
    return None


def _unknown_variable() -> str | None:
    """The line for an `OTEL_DELTA_` variable meant as a setting that names none.

    pydantic-settings reads only the variables of the sections it knows: one whose section is
    misspelt (`OTEL_DELTA_DELTA_LAKE__TABLE_PATH`) or written with one underscore where two
    belong (`OTEL_DELTA_BUFFER_MAX_ROWS`) was ignored without a word, and the bridge ran with
    the file's value, e.g. writing to ./lakehouse instead of the bucket. Other variables under
    the prefix are left alone: OTEL_DELTA_HASH_KEY and the like name no section, and neither
    do Kubernetes service links (OTEL_DELTA_SERVICE_HOST: one underscore, no key after it)."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    sections = {
        name: {f.alias or key for key, f in field.annotation.model_fields.items()}
        for name, field in Settings.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }
    for variable in sorted(os.environ):
        if not variable.upper().startswith(prefix.upper()):
            continue
        rest = variable[len(prefix) :].lower()
        section, nested, _ = rest.partition("__")
        if nested:
            if section not in sections:
                return f"${variable}: no section {section!r} (sections: {', '.join(sections)})"
            continue
        for name, keys in sections.items():
            key = rest.removeprefix(name + "_")
            if key != rest and key in keys:
                right = f"{prefix}{name.upper()}__{key.upper()}"
                return f"${variable}: not read; the setting {name}.{key} is ${right}"
    return None


def load_settings(path: str | Path | None = None) -> Settings:
    """Settings from `path` (default: ./deltalake.toml if present) plus the environment."""
    explicit = path is not None
    file = Path(path if explicit else DEFAULT_CONFIG_FILE)
    if explicit and not file.is_file():
        raise ConfigError(f"{file}: no such file")
    if unknown := _unknown_variable():
        raise ConfigError(unknown)
    file_settings = type(
        "FileSettings",
        (Settings,),
        {"model_config": {**Settings.model_config, "toml_file": file if file.is_file() else None}},
    )
    try:
        settings = file_settings()
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}") from None
    except ValidationError as exc:
        raise invalid_settings(exc, file) from None
    except SettingsError as exc:
        named = _not_json_variable()
        raise ConfigError(f"{named or exc}".splitlines()[0]) from None
    for key in compatibility_keys_set(settings):
        log.warning("config: %s is accepted for compatibility but has no effect", key)
    _warn_of_short_retention(settings)
    return settings


def check_serving(settings: Settings, path: str | Path | None = None) -> None:
    """What `serve` needs of the settings beyond each key's own rules (the other commands
    open no write-ahead log: a read-only `query` of an existing config must still run).

    With ack = "wal", the log must have room for the largest request beside its newest
    segment, which is never deleted and may hold up to `segment_bytes` of committed records.
    A record is the body as received (compressed, if it came so) or, for OTLP/JSON, its
    protobuf: at most `receiver.max_receive_message_bytes` either way. A request the receiver
    took but the log could not was answered "full, retry later", and retried for ever."""
    if settings.buffer.ack != "wal":
        return
    file = Path(path if path is not None else DEFAULT_CONFIG_FILE)
    largest = settings.receiver.max_receive_message_bytes
    wal = settings.wal
    if wal.max_bytes < largest + wal.segment_bytes:
        raise ConfigError(
            f"wal.max_bytes ({file} or $OTEL_DELTA_WAL__MAX_BYTES): must be at least "
            f"receiver.max_receive_message_bytes ({largest}) + wal.segment_bytes "
            f"({wal.segment_bytes}) = {largest + wal.segment_bytes}, so the largest request "
            "fits beside the newest segment: raise it, or lower one of those "
            f"(got {wal.max_bytes})"
        )


# below this, a vacuum may delete the files of a snapshot a reader still has open
SHORT_RETENTION_HOURS = 1


def _warn_of_short_retention(settings: Settings) -> None:
    """One WARNING for a vacuum retention shorter than a query may take: a file compaction
    replaced is then deleted while a reader's snapshot still lists it, and that reader fails
    with FileNotFoundError (seen in a soak run at `retention_hours = 0`). Allowed, as Delta
    allows it with its check turned off, for a lake no one reads while it is maintained."""
    table = settings.deltalake.table
    if table.vacuum_enabled and table.retention_hours < SHORT_RETENTION_HOURS:
        log.warning(
            "config: deltalake.table.retention_hours = %d: a vacuum deletes replaced files "
            "that a running query or an open snapshot may still read (it then fails with "
            "FileNotFoundError); Delta's default is 168",
            table.retention_hours,
        )


def compatibility_keys_set(settings: BaseModel) -> list[str]:
    """The COMPATIBILITY_KEYS given in the file or the environment (dotted names)."""
    found = []
    for path in COMPATIBILITY_KEYS:
        model: Any = settings
        for part in path[:-1]:
            model = getattr(model, "schema_" if part == "schema" else part)
        if path[-1] in model.model_fields_set:
            found.append(".".join(path))
    return found
