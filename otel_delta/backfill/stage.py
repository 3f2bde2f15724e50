"""One input file → Arrow tables per telemetry table, dead letters and counts.

This is what a Spark task (or the local delta-rs path) runs per file. It converts with the
receiver's own converters (`Signal.convert`), so backfilled rows equal ingested rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from otel_delta.backfill.decode import UndecodableRecord, decode_record
from otel_delta.backfill.files import BadRecord, Format, UnreadableFile, records
from otel_delta.pipeline.admission import admit
from otel_delta.tables.schemas import DEAD_LETTERS

MAX_RAW_BYTES = 1 << 20
CHANGED_WHILE_READ = (
    "file changed while the backfill read it (still being written?): not loaded; "
    "run the backfill again once the file is closed"
)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def nothing_decoded(decoded: int, dead_letters: int) -> bool:
    """Did the file give only dead letters (not in the format it was read as, or unreadable)?

    Such a file is not recorded as loaded: what it holds may load with the right `--format`
    (or once it is readable), which a recorded hash would refuse forever. A file with any
    decoded record is recorded, its bad records dead-lettered: re-reading it would store its
    good records twice. An empty file (neither) is recorded: it holds nothing to load.
    """
    return decoded == 0 and dead_letters > 0


@dataclass
class StagedFile:
    """The result of converting one file."""

    path: str
    sha256: str
    tables: dict[str, list[pa.Table]] = field(default_factory=dict)
    dead: list[dict] = field(default_factory=list)
    records: int = 0
    decoded: int = 0  # records decoded and converted (their rows stored, or rejected items)
    rejected: int = 0

    @property
    def rows(self) -> int:
        return sum(t.num_rows for parts in self.tables.values() for t in parts)

    @property
    def nothing_decoded(self) -> bool:
        return nothing_decoded(self.decoded, len(self.dead))

    def bad(self, offset: int, line: int | None, reason: str, raw: bytes) -> None:
        self.dead.append(
            {
                "file": self.path,
                "file_sha256": self.sha256,
                "offset": offset,
                "line": line,
                "reason": reason,
                "raw": raw[:MAX_RAW_BYTES],
                "loaded_at": datetime.now(UTC),
            }
        )

    def dead_letters(self) -> pa.Table:
        return pa.Table.from_pylist(self.dead, schema=DEAD_LETTERS)

    def table(self, name: str) -> pa.Table:
        return pa.concat_tables(self.tables[name])


def stage_file(path: str, sha256: str, fmt: Format, partition_by: Sequence[str] = ()) -> StagedFile:
    """Never raises for bad input: what cannot be read becomes a dead letter with its reason.

    `sha256` is the hash the plan read; the ledger records it as what was loaded. A file
    that changed since (an exporter still writing it) is not loaded: its records would be
    recorded under the old hash, so a later run of the same, now unchanged file would find
    its new hash unrecorded and store everything again. It gives one dead letter instead, so
    it is not recorded (`nothing_decoded`) and a later run loads it whole.
    """
    staged = StagedFile(path, sha256)
    try:
        data = Path(path).read_bytes()
        if hashlib.sha256(data).hexdigest() != sha256:
            staged.bad(-1, None, CHANGED_WHILE_READ, b"")
            return staged
        items = list(records(data, fmt))
    except (OSError, UnreadableFile) as exc:
        staged.bad(-1, None, f"unreadable file: {exc}", b"")
        return staged
    for item in items:
        if isinstance(item, BadRecord):
            staged.bad(item.offset, item.line, item.reason, item.raw)
            continue
        staged.records += 1
        try:
            signal, request = decode_record(item.payload, json_line=item.line is not None)
            converted = admit(signal.convert(request), partition_by)  # as the receiver does
        except UndecodableRecord as exc:
            staged.bad(item.offset, item.line, str(exc), item.payload)
            continue
        except Exception as exc:  # a converter bug must not fail the whole load
            staged.bad(item.offset, item.line, f"conversion failed: {exc!r}", item.payload)
            continue
        staged.decoded += 1
        staged.rejected += converted.rejected.count
        for name, table in converted.tables.items():
            if table.num_rows:
                staged.tables.setdefault(name, []).append(table)
    return staged
