"""The transport-neutral receiving side: an Export's bytes in, an `Outcome` out."""

from otel_delta.pipeline.decode import Decoder, use_native
from otel_delta.pipeline.export import ExportPipeline
from otel_delta.pipeline.outcome import Accepted, Outcome, Rejected, Retryable

__all__ = [
    "Accepted",
    "Decoder",
    "ExportPipeline",
    "Outcome",
    "Rejected",
    "Retryable",
    "use_native",
]
