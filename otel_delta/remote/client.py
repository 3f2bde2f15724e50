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
from otel_delta.errors import ConfigError
from otel_delta.remote.protocol import generated, read_ipc
from otel_delta.transports.tls import read_file


class ConnectorClient:
    """`ca_file`: call a service that serves TLS (`[connector_service.tls]`), trusting this
    CA's certificates (PEM); `cert_file` and `key_file`: the client certificate for mTLS.

    Any of the three means TLS: a certificate without `ca_file` trusts the system's roots (as
    gRPC does without root certificates), it is never sent over a plain-text channel with the
    token. None of them (or "") is plain text, for a service on loopback. The files are read
    here, so a missing one, or a certificate without its key, is a ConfigError before any call."""

    SECTION = "ConnectorClient"  # what a ConfigError names, as a config section

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
        # "" is unset, as in the config's TLS sections
        ca_file, cert_file, key_file = (f or None for f in (ca_file, cert_file, key_file))
        if (cert_file is None) != (key_file is None):
            given, missing = (
                ("cert_file", "key_file") if key_file is None else ("key_file", "cert_file")
            )
            raise ConfigError(f"{self.SECTION}: {given} needs {missing}: set both, or neither")
        if ca_file is None and cert_file is None:
            self.channel = grpc.insecure_channel(endpoint)
        else:
            # read now: gRPC would only fail each call's handshake on a path it cannot open
            ca, cert, key = (
                None if path is None else read_file(path, name, self.SECTION)
                for path, name in (
                    (ca_file, "ca_file"),
                    (cert_file, "cert_file"),
                    (key_file, "key_file"),
                )
            )
            credentials = grpc.ssl_channel_credentials(
                root_certificates=ca, private_key=key, certificate_chain=cert
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
