"""Remote use of the connector: the ConnectorService gRPC server (in `serve`) and a client."""
