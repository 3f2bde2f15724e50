"""The bridge as users start it (`otel-delta serve --config FILE`), its lake on Azure Blob Storage
(Azurite): spans that the OpenTelemetry SDK exports land in the spans table in the container,
each exactly once, both those committed while it runs and those a SIGTERM stop commits."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.azure import AzureServer
from tests.helpers import LOOPBACK, ServeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

LAKE = "lake"
ROUNDS = 2  # the first lands while the bridge runs, the second is committed by its SIGTERM stop
TRACES_PER_ROUND = 60  # of two spans each: 240 spans, in Exports of up to 50


def write_config(tmp_path: Path, azure: AzureServer) -> Path:
    """A deltalake.toml with its lake at az://container/lake, its WAL in tmp_path / wal."""
    config = tmp_path / "deltalake.toml"
    config.write_text(
        LOOPBACK
        + "[buffer]\nflush_interval_seconds = 0.5\n"
        + f'[wal]\ndir = "{tmp_path / "wal"}"\n'
        + f'[deltalake]\ntable_path = "{azure.url(LAKE)}"\n'
        + "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        + '[deltalake.operations]\nengine = "delta-rs"\n'
        + azure.toml()
    )
    return config


def stored_span_ids(azure: AzureServer) -> list[str]:
    """span_id of every row of the spans table in the container ([] while it does not exist)."""
    uri, options = azure.url(LAKE, "spans"), azure.storage_options()
    if not DeltaTable.is_deltatable(uri, storage_options=options):
        return []
    table: pa.Table = DeltaTable(uri, storage_options=options).to_pyarrow_table()
    return table.column("span_id").to_pylist()


def test_sdk_spans_land_once_each_in_the_azure_spans_table(tmp_path: Path, azure: AzureServer):
    server = ServeProcess(write_config(tmp_path, azure))
    memory = InMemorySpanExporter()  # what the SDK sent, to compare with what was stored
    provider = TracerProvider(resource=Resource.create({"service.name": "azure-e2e"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=server.endpoint, insecure=True, timeout=30),
            max_export_batch_size=50,
        )
    )
    tracer = provider.get_tracer("tests.azure")

    def send(round_: int) -> None:
        for i in range(TRACES_PER_ROUND):
            with tracer.start_as_current_span(f"request {round_}.{i}"):  # noqa: SIM117
                with tracer.start_as_current_span("query"):
                    pass
        assert provider.force_flush(30_000), "the SDK did not export its spans in time"

    try:
        send(1)
        first = len(memory.get_finished_spans())
        deadline = time.monotonic() + 60  # acknowledged once in the WAL: on Azure a flush later
        while len(stored_span_ids(azure)) < first and time.monotonic() < deadline:
            time.sleep(0.25)
        assert len(stored_span_ids(azure)) == first, "".join(server.lines)
        send(2)  # acknowledged, and the bridge stopped at once: the stop must commit them
    finally:
        provider.shutdown()
        code = server.stop()
    assert code == 0, "".join(server.lines)

    sent = [format(span.get_span_context().span_id, "016x") for span in memory.get_finished_spans()]
    assert len(sent) == ROUNDS * TRACES_PER_ROUND * 2 == len(set(sent))
    stored = stored_span_ids(azure)
    assert len(stored) == len(set(stored)), f"{len(stored) - len(set(stored))} span(s) twice"
    assert sorted(stored) == sorted(sent)
    # a Delta table in the container, not anywhere on the local disk
    blobs = azure.objects(LAKE, "spans")
    assert f"{LAKE}/spans/_delta_log/00000000000000000000.json" in blobs, blobs
    assert any(blob.endswith(".parquet") for blob in blobs), blobs
    assert not (tmp_path / "lakehouse").exists()
    assert not any(path.suffix == ".parquet" for path in tmp_path.rglob("*"))


def test_a_refused_sas_token_is_named_in_one_line_and_never_shown(
    tmp_path: Path, azure: AzureServer
) -> None:
    """A SAS token the account refuses: `serve` and a table command each fail in one line that
    says the store refused (403), and neither shows the token's signature (delta-rs's object
    store writes a request's URL, which carries the SAS, as REDACTED)."""
    signature = "SECRETsignature0123"
    sas = f"sv=2021-08-06&ss=b&srt=sco&sp=rwdlac&se=2030-01-01T00%3A00%3A00Z&sig={signature}%3D"
    config = write_config(tmp_path, azure)
    text = config.read_text().replace(
        f'AZURE_STORAGE_ACCOUNT_KEY = "{azure.account_key}"', f'AZURE_STORAGE_SAS_TOKEN = "{sas}"'
    )
    assert "AZURE_STORAGE_SAS_TOKEN" in text
    config.write_text(text)
    for argv, code in ((["tables"], 1), (["serve"], 2)):
        run = subprocess.run(
            [sys.executable, "-m", "otel_delta.cli", *argv, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == code, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert "403 Forbidden" in run.stderr, run.stderr
        assert signature not in run.stderr + run.stdout
