"""The write-ahead log: durable, checksummed records of accepted Exports, replayed on start."""

from otel_delta.wal.log import WriteAheadLog
from otel_delta.wal.record import Record

__all__ = ["Record", "WriteAheadLog"]
