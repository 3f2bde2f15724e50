"""A small client of the ConnectorService: stubs with the bearer token, Query as an Arrow table,
History as the connector's HistoryEntry list."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa

from otel_delta.connector.results import HistoryEntry
from otel_delta.remote.protocol import generated, read_ipc


class ConnectorClient:
    """`ca_file`: call a service that serves TLS (`[connector_service.tls]`), trusting this
    CA's certificates (PEM); `cert_file` and `key_file`: the client certificate for mTLS."""

    def __init__(
        self,
        endpoint: str,
        token: str | None,
        *,
        ca_file: str | Path | None = None,
        cert_file: str | Path | None = None,
        key_file: str | Path | None = None,
    ) -> None:
        self.pb, pb_grpc = generated()
        if ca_file is None:
            self.channel = grpc.insecure_channel(endpoint)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=Path(ca_file).read_bytes(),
                private_key=Path(key_file).read_bytes() if key_file else None,
                certificate_chain=Path(cert_file).read_bytes() if cert_file else None,
            )
            self.channel = grpc.secure_channel(endpoint, credentials)
        self.stub = pb_grpc.ConnectorServiceStub(self.channel)
        self.metadata = [("authorization", f"Bearer {token}")] if token is not None else []

    def call(self, rpc: str, request: Any, timeout: float = 60) -> Any:
        return getattr(self.stub, rpc)(request, metadata=self.metadata, timeout=timeout)

    def history(
        self, table: str, limit: int | None = None, timeout: float = 60
    ) -> list[HistoryEntry]:
        """The table's commits, newest first, as the connector's `history(limit)` gives them;
        `user` is not sent (None). A server older than `normalized_metrics` in the proto sends
        none: they are computed here from `metrics`, as the server would have."""
        answer = self.call(
            "History", self.pb.HistoryRequest(table=table, limit=limit or 0), timeout
        )
        entries = []
        for e in answer.entries:
            entries.append(
                HistoryEntry.of_commit(
                    version=e.version,
                    timestamp=datetime.fromtimestamp(e.timestamp_ms / 1000, UTC),
                    operation=e.operation,
                    parameters=json.loads(e.parameters_json) if e.parameters_json else {},
                    metrics=json.loads(e.metrics_json) if e.metrics_json else {},
                    user=None,
                    normalized_metrics=dict(e.normalized_metrics),
                )
            )
        return entries

    def query(self, table: str, timeout: float = 300, **fields: Any) -> pa.Table:
        chunks = self.stub.Query(
            self.pb.QueryRequest(table=table, **fields), metadata=self.metadata, timeout=timeout
        )
        return read_ipc(chunk.data for chunk in chunks)

    def close(self) -> None:
        self.channel.close()
