"""A small client of the ConnectorService: stubs with the bearer token, Query as an Arrow table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa

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

    def query(self, table: str, timeout: float = 300, **fields: Any) -> pa.Table:
        chunks = self.stub.Query(
            self.pb.QueryRequest(table=table, **fields), metadata=self.metadata, timeout=timeout
        )
        return read_ipc(chunk.data for chunk in chunks)

    def close(self) -> None:
        self.channel.close()
