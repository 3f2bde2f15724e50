"""The backfill without Spark: convert in this process, commit with delta-rs.

For `engine = "delta-rs"`, and the baseline of the backfill benchmark.
"""

from __future__ import annotations

import pyarrow as pa
from deltalake import Transaction

from otel_delta.backfill import ledger
from otel_delta.backfill.files import Format
from otel_delta.backfill.plan import Loaded, PlannedFile
from otel_delta.backfill.progress import Progress
from otel_delta.backfill.stage import stage_file
from otel_delta.engines import DeltaRsEngine
from otel_delta.errors import store_errors_named


def run_local(
    files: list[PlannedFile], fmt: Format, engine: DeltaRsEngine, batch: str, progress: Progress
) -> Loaded:
    loaded = Loaded()
    parts: dict[str, list[pa.Table]] = {}
    dead: list[pa.Table] = []  # of the files loaded: committed with the load's txn id
    unloaded_dead: dict[str, pa.Table] = {}  # of files not loaded: once per file
    for done, planned in enumerate(files, start=1):
        staged = stage_file(planned.path, planned.sha256, fmt, engine.lakehouse.partition_by)
        for name, tables in staged.tables.items():
            parts.setdefault(name, []).extend(tables)
        if staged.nothing_decoded:
            unloaded_dead[planned.sha256] = staged.dead_letters()
        elif staged.dead:
            dead.append(staged.dead_letters())
        loaded.add_file(
            planned,
            staged.records,
            staged.rows,
            staged.rejected,
            len(staged.dead),
            staged.decoded,
        )
        progress.update(done, loaded.total_rows)
    app = ledger.app_id(batch)
    lakehouse = engine.lakehouse
    storage = lakehouse.storage
    for name, tables in parts.items():
        data = pa.concat_tables(tables)
        loaded.rows[name] = data.num_rows
        with store_errors_named(name, lakehouse.uri(name)):
            if ledger.committed(lakehouse.uri(name), app, storage):
                loaded.skipped_commits.append(name)
                continue
            engine.append(name, data, Transaction(app, ledger.TXN_VERSION))
    with store_errors_named(ledger.DEAD_LETTER_TABLE, lakehouse.uri(ledger.DEAD_LETTER_TABLE)):
        if dead:
            ledger.append_once(
                lakehouse.root,
                ledger.DEAD_LETTER_TABLE,
                pa.concat_tables(dead),
                app,
                storage,
            )
        ledger.append_dead_letters_of_unloaded(lakehouse.root, unloaded_dead, storage)
    return loaded
