from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from otel_delta.config import check_serving, load_settings
from otel_delta.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_deltalake_toml_is_valid_and_matches_defaults() -> None:
    settings = load_settings(ROOT / "deltalake.toml")
    assert settings.receiver.grpc_endpoint == "0.0.0.0:4317"
    assert settings.deltalake.table_path == "./lakehouse"
    assert settings.deltalake.partition_by == ["service_name", "date"]
    assert settings.buffer.flush_interval_seconds == 10.0  # chosen by bench/flush_files.py
    assert settings.receiver.max_receive_message_bytes == 64 * 1024 * 1024


def test_ack_commit_flushes_every_second_unless_told(tmp_path: Path, monkeypatch) -> None:
    """With ack = "commit" each Export waits for the flush: the WAL mode's 10 s default is the
    SDKs' export timeout (tests/transports/test_java_sdk.py), so the mode has its own."""
    config = tmp_path / "c.toml"
    config.write_text('[buffer]\nack = "commit"\n')
    assert load_settings(config).buffer.flush_interval_seconds == 1.0
    config.write_text('[buffer]\nack = "commit"\nflush_interval_seconds = 5.0\n')
    assert load_settings(config).buffer.flush_interval_seconds == 5.0
    config.write_text('[buffer]\nack = "wal"\n')
    assert load_settings(config).buffer.flush_interval_seconds == 10.0
    monkeypatch.setenv("OTEL_DELTA_BUFFER__ACK", "commit")  # the mode from the environment
    assert load_settings(config).buffer.flush_interval_seconds == 1.0


def test_the_resident_memory_limit_follows_max_bytes_unless_set(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[buffer]\nmax_bytes = 1073741824\n")
    assert load_settings(config).buffer.resident_limit() == (1024 + 224) * 1024 * 1024
    config.write_text("[buffer]\nmax_resident_bytes = 2000000000\n")
    assert load_settings(config).buffer.resident_limit() == 2_000_000_000
    config.write_text("[buffer]\nmax_resident_bytes = 0\n")
    assert load_settings(config).buffer.resident_limit() is None
    config.write_text("[buffer]\nmax_resident_bytes = -1\n")
    with pytest.raises(ConfigError, match=r"buffer\.max_resident_bytes"):
        load_settings(config)


def test_environment_overrides_file(tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[buffer]\nmax_rows = 10\n[deltalake.table]\ncompression = "SNAPPY"\n')
    monkeypatch.setenv("OTEL_DELTA_BUFFER__MAX_ROWS", "20")
    monkeypatch.setenv("OTEL_DELTA_DELTALAKE__TABLE__COMPRESSION", "LZ4")
    monkeypatch.setenv("OTEL_DELTA_DELTALAKE__PARTITION_BY", '["service_name"]')
    settings = load_settings(config)
    assert settings.buffer.max_rows == 20
    assert settings.deltalake.table.compression == "LZ4"
    assert settings.deltalake.partition_by == ["service_name"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[buffer]\nmax_rows = -1\n", "buffer.max_rows"),
        ("[buffer]\nflush_interval_seconds = 'soon'\n", "buffer.flush_interval_seconds"),
        ("[receiver]\ngrpc_endpoint = 'nowhere'\n", "receiver.grpc_endpoint"),
        ("[receiver]\nnative_convert = 'maybe'\n", "receiver.native_convert"),
        ("[deltalake]\npartition_by = ['colour']\n", "deltalake.partition_by"),
        ("[deltalake.table]\ncompresion = 'ZSTD'\n", "deltalake.table.compresion: unknown key"),
        ("[deltalake.schema]\nstrict_mode = 'maybe'\n", "deltalake.schema.strict_mode"),
        ("[buffer\n", "not valid TOML"),
        # every number has a range: no hang, no overflow, no traceback later
        ("[buffer]\nflush_interval_seconds = inf\n", "buffer.flush_interval_seconds"),
        ("[buffer]\nflush_interval_seconds = nan\n", "buffer.flush_interval_seconds"),
        ("[buffer]\nretry_after_seconds = 1e300\n", "buffer.retry_after_seconds"),
        ("[receiver]\nmax_receive_message_bytes = 3e9\n", "receiver.max_receive_message_bytes"),
        (
            "[receiver]\nmax_receive_message_bytes = 3000000000\n",
            "receiver.max_receive_message_bytes",
        ),
        ("[receiver]\ngrpc_window_bytes = 1024\n", "receiver.grpc_window_bytes"),
        ("[wal]\nsegment_bytes = 10\n", "wal.segment_bytes"),
        ("[wal]\nmax_bytes = 1048576\nsegment_bytes = 1048576\n", "half of max_bytes"),
        ("[buffer]\nack = 'maybe'\n", "buffer.ack"),
        ("[receiver]\nhttp_endpoint = '4318'\n", "receiver.http_endpoint"),
        ("[receiver.tls]\ncert_file = 'a.crt'\n", "set both cert_file and key_file"),
        ("[receiver.tls]\nclient_ca_file = 'ca.crt'\n", "client_ca_file (mTLS) needs"),
        ("[receiver.tls]\nreload_interval_seconds = -1\n", "receiver.tls.reload_interval_seconds"),
        ("[receiver.tls]\nreload_interval_seconds = nan\n", "receiver.tls.reload_interval_seconds"),
        ("[receiver.auth]\ntoken = 'inline'\n", "receiver.auth.token: unknown key"),
        ("[admin]\nendpoint = 'localhost'\n", "admin.endpoint"),
        ("[admin]\ncommit_failure_seconds = inf\n", "admin.commit_failure_seconds"),
        ("[logging]\nformat = 'xml'\n", "logging.format"),
    ],
)
def test_invalid_config_is_one_line_naming_the_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    message = str(err.value)
    assert expected in message and "\n" not in message


def test_a_write_ahead_log_smaller_than_a_request_and_a_segment_is_a_config_error(
    tmp_path: Path, monkeypatch
) -> None:
    """wal.max_bytes of 2 MiB with 1 MiB segments was accepted beside the receiver's 64 MiB
    request limit: a 3 MB request was then answered "full, retry later" for ever. The log
    must hold the largest request beside its newest segment; only in ack = "wal", and only
    for `serve`: the other commands open no log, and a `query` of that config still runs."""
    config = tmp_path / "c.toml"
    config.write_text("")
    monkeypatch.setenv("OTEL_DELTA_WAL__MAX_BYTES", "2097152")
    monkeypatch.setenv("OTEL_DELTA_WAL__SEGMENT_BYTES", "1048576")
    with pytest.raises(ConfigError) as err:
        check_serving(load_settings(config), config)
    message = str(err.value)
    assert message.startswith("config error: wal.max_bytes (") and "\n" not in message
    assert "$OTEL_DELTA_WAL__MAX_BYTES" in message
    assert "receiver.max_receive_message_bytes (67108864)" in message
    assert "wal.segment_bytes (1048576) = 68157440" in message
    assert "(got 2097152)" in message
    # `serve` as users start it: that one line, before it listens or touches the log
    done = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr == f"otel-delta: {message}\n"
    listed = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "tables", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OTEL_DELTA_DELTALAKE__TABLE_PATH": str(tmp_path / "lake")},
    )
    assert listed.returncode == 0, listed.stderr
    # a request limit the log has room for, beside a segment: accepted
    config.write_text("[receiver]\nmax_receive_message_bytes = 1048576\n")
    check_serving(load_settings(config), config)
    config.write_text("[receiver]\nmax_receive_message_bytes = 1048577\n")
    with pytest.raises(ConfigError, match=r"wal\.max_bytes"):
        check_serving(load_settings(config), config)
    # no write-ahead log in ack = "commit": its settings bound nothing
    config.write_text('[buffer]\nack = "commit"\n')
    check_serving(load_settings(config), config)


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(tmp_path / "absent.toml")


def test_engine_and_spark_sections(tmp_path: Path) -> None:
    defaults = load_settings(ROOT / "deltalake.toml")
    assert defaults.deltalake.operations.engine == "auto"
    assert defaults.deltalake.operations.bulk_threshold_rows == 500_000
    assert defaults.spark.master == "local[*]" and defaults.spark.ui_enabled is False
    config = tmp_path / "c.toml"
    config.write_text(
        '[deltalake.operations]\nengine = "spark"\n'
        '[spark]\nmaster = "spark://10.0.0.1:7077"\n[spark.conf]\n"spark.cores.max" = "8"\n'
    )
    settings = load_settings(config)
    assert settings.deltalake.operations.engine == "spark"
    assert settings.spark.conf == {"spark.cores.max": "8"}
    config.write_text('[deltalake.operations]\nengine = "duckdb"\n')
    with pytest.raises(ConfigError, match=r"deltalake\.operations\.engine"):
        load_settings(config)


def test_compatibility_keys_load_with_a_warning_and_are_not_shipped(tmp_path: Path, caplog) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        "[deltalake.table]\nparallelism = 8\n[deltalake.schema]\nstrict_mode = true\n"
    )
    with caplog.at_level("WARNING", logger="otel_delta.config"):
        settings = load_settings(config)
    assert settings.deltalake.table.parallelism == 8
    warned = [r.getMessage() for r in caplog.records]
    assert any("deltalake.table.parallelism" in m and "no effect" in m for m in warned)
    assert any("deltalake.schema.strict_mode" in m for m in warned)
    caplog.clear()
    with caplog.at_level("WARNING", logger="otel_delta.config"):
        load_settings(ROOT / "deltalake.toml")
    assert caplog.records == []  # the shipped file sets none of them


@pytest.mark.parametrize(
    ("hours", "vacuum", "warned"), [(0, True, True), (1, True, False), (0, False, False)]
)
def test_a_vacuum_retention_under_an_hour_is_said_to_break_readers(
    tmp_path: Path, caplog, hours: int, vacuum: bool, warned: bool
) -> None:
    """Allowed, as Delta allows it with its check off, but a reader whose snapshot lists a file
    a vacuum deleted fails (a soak run at 0 h: `trace` exited on FileNotFoundError)."""
    config = tmp_path / "c.toml"
    config.write_text(
        f"[deltalake.table]\nretention_hours = {hours}\nvacuum_enabled = {str(vacuum).lower()}\n"
    )
    with caplog.at_level("WARNING", logger="otel_delta.config"):
        load_settings(config)
    said = [r.getMessage() for r in caplog.records if "retention_hours" in r.getMessage()]
    assert bool(said) is warned and all("FileNotFoundError" in m for m in said)


@pytest.mark.parametrize("value", ["s3cret\n", " s3cret \n", "s3cret\r\n"])
def test_a_token_from_a_file_or_secret_loses_its_trailing_newline(value: str, monkeypatch) -> None:
    """`kubectl create secret --from-file` and `openssl rand -hex 32 > token` leave a newline
    at the end; clients send the token without it (a header cannot hold one). Kept, no
    request could ever match: every Export would be refused as unauthenticated."""
    from otel_delta.auth import BearerToken
    from otel_delta.config import AuthSettings, ConnectorServiceSettings

    monkeypatch.setenv("OTEL_DELTA_TEST_TOKEN", value)
    token = AuthSettings(token_env="OTEL_DELTA_TEST_TOKEN").resolved_token()
    assert token == "s3cret"
    BearerToken(token).check("Bearer s3cret")  # accepted
    remote = ConnectorServiceSettings(enabled=True, token_env="OTEL_DELTA_TEST_TOKEN")
    assert remote.resolved_token() == "s3cret"
    monkeypatch.setenv("OTEL_DELTA_TEST_TOKEN", " \n")
    with pytest.raises(ConfigError, match=r"receiver.auth.token_env: \$OTEL_DELTA_TEST_TOKEN"):
        AuthSettings(token_env="OTEL_DELTA_TEST_TOKEN").resolved_token()


@pytest.mark.parametrize(
    ("text", "key", "env"),
    [
        ('[wal]\ndir = ""\n', "wal.dir", None),
        ('[wal]\ndir = "  "\n', "wal.dir", None),
        ('[deltalake]\ntable_path = ""\n', "deltalake.table_path", None),
        ('[deltalake]\ntable_path = " \\t"\n', "deltalake.table_path", None),
        ("", "wal.dir", ("OTEL_DELTA_WAL__DIR", "")),
        ("", "deltalake.table_path", ("OTEL_DELTA_DELTALAKE__TABLE_PATH", " ")),
    ],
)
def test_an_empty_path_is_refused_not_taken_as_the_current_directory(
    tmp_path: Path, monkeypatch, text: str, key: str, env: tuple[str, str] | None
) -> None:
    """Empty turns an endpoint off elsewhere in the file; an empty path meant the directory
    the bridge runs in (segments, lock and tables written there), which nobody asks for."""
    config = tmp_path / "c.toml"
    config.write_text(text)
    if env is not None:
        monkeypatch.setenv(*env)
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    message = str(err.value)
    assert f"{key} (" in message and "must not be empty" in message and "\n" not in message


@pytest.mark.parametrize(
    ("variable", "value", "example"),
    [
        ("OTEL_DELTA_DELTALAKE__PARTITION_BY", "service_name", '["service_name","date"]'),
        ("OTEL_DELTA_DELTALAKE__STORAGE__OPTIONS", "{AWS_REGION: eu-west-1}", '{"AWS_REGION"'),
        ("otel_delta_spark__conf", "spark.cores.max=8", "{"),
        ("OTEL_DELTA_BUFFER", "max_rows=10", "{"),
    ],
)
def test_a_variable_that_is_not_json_is_named_with_what_is_expected(
    tmp_path: Path, monkeypatch, variable: str, value: str, example: str
) -> None:
    """A list, table or section set from the environment is read as JSON; pydantic-settings
    reported only 'error parsing value for field "deltalake" from source "EnvSettingsSource"',
    naming neither the variable nor what it should hold."""
    config = tmp_path / "c.toml"
    config.write_text("")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    message = str(err.value)
    assert f"${variable}" in message and "JSON" in message and example in message, message
    assert "\n" not in message
    # a list is shown as given; a table or section may hold credentials, so it is not
    assert (repr(value) in message) == variable.endswith("PARTITION_BY")


def test_storage_options_take_toml_booleans_and_numbers_as_the_strings_delta_rs_reads(
    tmp_path: Path, monkeypatch
) -> None:
    """object_store's options are strings; `AWS_ALLOW_HTTP = true` (a TOML boolean, as one
    writes it) was refused with 'Input should be a valid string'."""
    config = tmp_path / "c.toml"
    config.write_text(
        "[deltalake.storage.options]\nAWS_ALLOW_HTTP = true\n"
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST = false\nAWS_MAX_RETRIES = 3\nRATIO = 0.5\n"
        'AWS_REGION = "eu-west-1"\n'
    )
    options = load_settings(config).deltalake.storage.options
    assert options == {
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_MAX_RETRIES": "3",
        "RATIO": "0.5",
        "AWS_REGION": "eu-west-1",
    }
    monkeypatch.setenv("OTEL_DELTA_DELTALAKE__STORAGE__OPTIONS", '{"AWS_MAX_RETRIES": 5}')
    assert load_settings(config).deltalake.storage.options["AWS_MAX_RETRIES"] == "5"
    config.write_text("[deltalake.storage.options]\nAWS_REGION = [1]\n")
    monkeypatch.delenv("OTEL_DELTA_DELTALAKE__STORAGE__OPTIONS")
    with pytest.raises(ConfigError, match=r"deltalake\.storage\.options\.AWS_REGION"):
        load_settings(config)


def test_spark_conf_and_kafka_options_take_toml_booleans_and_numbers_as_text(
    tmp_path: Path,
) -> None:
    """Spark's conf and Kafka's client settings are strings too: `ui.enabled = false` or a
    partition count written as TOML's own boolean or number was refused."""
    config = tmp_path / "c.toml"
    config.write_text(
        '[spark.conf]\n"spark.sql.shuffle.partitions" = 8\n"spark.ui.showConsoleProgress" = false\n'
        '[stream.kafka_options]\n"request.timeout.ms" = 30000\n"enable.idempotence" = true\n'
    )
    settings = load_settings(config)
    assert settings.spark.conf == {
        "spark.sql.shuffle.partitions": "8",
        "spark.ui.showConsoleProgress": "false",
    }
    assert settings.stream.kafka_options == {
        "request.timeout.ms": "30000",
        "enable.idempotence": "true",
    }


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[connector_service]\nenabled = true\ntoken = 73105128\n", "connector_service.token"),
        ("[deltalake.storage]\noptions = 'AKIA73105128'\n", "deltalake.storage.options"),
        (
            "[deltalake.storage.options]\nAWS_SECRET_ACCESS_KEY = 1973-10-05T12:08:00Z\n",
            "deltalake.storage.options.AWS_SECRET_ACCESS_KEY",
        ),
        ("[spark]\nconf = 'fs.s3a.secret.key=73105128'\n", "spark.conf"),
        ("[stream]\nkafka_options = 'sasl.password=73105128'\n", "stream.kafka_options"),
    ],
)
def test_a_config_error_does_not_echo_a_value_that_may_be_a_secret(
    tmp_path: Path, text: str, key: str
) -> None:
    """A command's config error goes to terminals and CI logs: it names the key and what it
    expects, never the value of a token or of storage, Spark or Kafka options (credentials)."""
    config = tmp_path / "c.toml"
    config.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "tables", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"otel-delta: config error: {key} ")
    assert "73105128" not in done.stderr and "1973" not in done.stderr


@pytest.mark.parametrize(
    ("variable", "expected"),
    [
        # a misspelt section: the file's table_path (./lakehouse) was used without a word
        ("OTEL_DELTA_DELTA_LAKE__TABLE_PATH", "no section 'delta_lake'"),
        ("OTEL_DELTA_BUFFERS__MAX_ROWS", "no section 'buffers'"),
        # one underscore where two belong
        ("OTEL_DELTA_BUFFER_MAX_ROWS", "buffer.max_rows is $OTEL_DELTA_BUFFER__MAX_ROWS"),
        ("otel_delta_wal_dir", "wal.dir is $OTEL_DELTA_WAL__DIR"),
    ],
)
def test_a_variable_that_names_no_setting_is_an_error_not_ignored(
    tmp_path: Path, monkeypatch, variable: str, expected: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text("")
    monkeypatch.setenv(variable, "/somewhere")
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    message = str(err.value)
    assert f"${variable}" in message and expected in message and "\n" not in message


def test_variables_under_the_prefix_that_are_not_settings_are_left_alone(
    tmp_path: Path, monkeypatch
) -> None:
    """The privacy key, the Spark jars, and the variables Kubernetes service links put into a
    pod for a Service named otel-delta or otel-delta-admin share the prefix."""
    for variable in (
        "OTEL_DELTA_HASH_KEY",
        "OTEL_DELTA_JARS",
        "OTEL_DELTA_SERVICE_HOST",
        "OTEL_DELTA_PORT_4317_TCP_ADDR",
        "OTEL_DELTA_ADMIN_SERVICE_PORT",
        "OTEL_DELTA_ADMIN_PORT",
    ):
        monkeypatch.setenv(variable, "10.0.0.1")
    config = tmp_path / "c.toml"
    config.write_text("")
    assert load_settings(config).buffer.max_rows == 100_000


def _setting_keys() -> set[str]:
    """Every dotted key of Settings a user sets, but those kept only for compatibility (not
    shipped, by design) and the keys inside free-form tables (options, conf)."""
    from pydantic import BaseModel

    from otel_delta.config import COMPATIBILITY_KEYS, Settings

    def walk(model: type[BaseModel], prefix: str) -> list[str]:
        keys = []
        for name, field in model.model_fields.items():
            key = prefix + (field.alias or name)
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                keys += walk(annotation, key + ".")
            else:
                keys.append(key)
        return keys

    return set(walk(Settings, "")) - {".".join(path) for path in COMPATIBILITY_KEYS}


def test_every_setting_is_in_the_shipped_file_and_the_readme() -> None:
    """An operator reads deltalake.toml and the README's table for what can be set: a key in
    neither (deltalake.table.change_data_feed, stream.stall_seconds were not in the file) is
    one they cannot know of, and a documented key that does not exist is refused at start."""
    import re

    section, in_file = "", set()
    for line in (ROOT / "deltalake.toml").read_text().splitlines():
        text = line.lstrip("#").strip()
        if header := re.fullmatch(r"\[([a-z_.]+)\]", text):
            section = header.group(1)
            in_file.add(section)  # a table of options: its header shows it
        elif key := re.match(r'"?([A-Za-z_.]+)"?\s*=', text):
            in_file.add(f"{section}.{key.group(1)}" if section else key.group(1))
    in_readme = set()
    for line in (ROOT / "README.md").read_text().splitlines():
        if row := re.match(r"\| (`[a-z_.]+`(?: / `[a-z_.]+`)*) \|", line):
            names = re.findall(r"`([a-z_.]+)`", row.group(1))
            base = names[0].rpartition(".")[0]
            in_readme.update(n if "." in n else f"{base}.{n}" for n in names)
    keys = _setting_keys()
    assert not keys - in_file, f"not in deltalake.toml: {sorted(keys - in_file)}"
    assert not keys - in_readme, f"not in the README's table: {sorted(keys - in_readme)}"
    assert not in_readme - keys, f"in the README's table, no such key: {sorted(in_readme - keys)}"


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ('compression = "GZIP"\ncompression_level = 12', "compression_level = 12"),
        (
            'compression = "BROTLI"\ncompaction_compression_level = 15',
            "compaction_compression_level = 15",
        ),
        ('compression = "ZSTD"\ncompaction_compression_level = 23', "compaction_compression_level"),
    ],
)
def test_a_level_the_codec_does_not_take_is_one_config_line(
    tmp_path: Path, table: str, said: str
) -> None:
    """pyarrow refused the level at the first write: `serve` died with a traceback, `tables`
    said "tables failed: ValueError" (exit 1) without naming the key."""
    config = tmp_path / "c.toml"
    config.write_text(
        f"[deltalake]\ntable_path = '{tmp_path / 'lake'}'\n[deltalake.table]\n{table}\n"
    )
    for command in ("serve", "tables"):
        done = subprocess.run(
            [sys.executable, "-m", "otel_delta.cli", command, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "deltalake.table" in done.stderr, done.stderr
        assert said in done.stderr and "Traceback" not in done.stderr


def test_compaction_takes_the_codec_s_highest_level_when_15_is_past_it(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    for codec, level in (("GZIP", 9), ("BROTLI", 11), ("ZSTD", 15), ("SNAPPY", 15)):
        config.write_text(f'[deltalake.table]\ncompression = "{codec}"\n')
        assert load_settings(config).deltalake.table.compaction_compression_level == level


@pytest.mark.parametrize("master", ["bogus://x", "", "locl[2]"])
def test_a_spark_master_spark_cannot_take_is_one_config_line(tmp_path: Path, master: str) -> None:
    """Spark refused it at the session's start, as a Java stack trace (JAVA_GATEWAY_EXITED)."""
    config = tmp_path / "c.toml"
    config.write_text(f'[spark]\nmaster = "{master}"\n')
    with pytest.raises(ConfigError, match=r"spark.master.*is no Spark master") as err:
        load_settings(config)
    assert "\n" not in str(err.value)
    for good in ("local[2]", "local", "spark://127.0.0.1:7077", "k8s://https://h:443", "yarn"):
        config.write_text(f'[spark]\nmaster = "{good}"\n')
        assert load_settings(config).spark.master == good
