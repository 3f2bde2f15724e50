"""OTLP/gRPC receiver."""

from otel_delta.receiver.server import OtlpReceiver

__all__ = ["OtlpReceiver"]
