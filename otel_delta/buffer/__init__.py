"""Buffering between the receiver and the writer."""

from otel_delta.buffer.group_commit import GroupCommitBuffer, rows_bytes

__all__ = ["GroupCommitBuffer", "rows_bytes"]
