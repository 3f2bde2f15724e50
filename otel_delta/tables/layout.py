"""How rows are laid out inside each Parquet file a table gets: row order and column encodings.

Applied by every engine to every append (delta-rs: sort + per-column encodings; Spark: sort):

- **Row order.** Rows are sorted by trace id, then time, inside each file. The spans of one
  trace (and its logs) then sit together: `trace_id` and the resource and scope columns become
  runs that dictionary + RLE store nearly free, `parent_span_id` repeats its neighbours', the
  times of a trace are close to each other (small deltas), and each file's and row group's
  min/max of `trace_id` is narrower, which is what a trace lookup skips files by. Metric points
  are sorted by series (name, then time).
- **Ids unique per row** (`span_id`) are not dictionary-encoded: a dictionary of values that never
  repeat is pure overhead (a page of values plus an index per row).
- **Nanosecond times** use DELTA_BINARY_PACKED: neighbouring times differ by far less than
  their magnitude, so deltas take a few bits where plain values take 8 bytes before zstd.

Only top-level columns can be configured this way: delta-rs names a column by its top-level
name, so nested fields (event times, attribute maps) keep the writer's defaults.

Ids stay lowercase hex strings rather than binary: Delta (delta-rs and Spark alike) keeps no
min/max statistics for BINARY columns, so binary ids would turn every trace lookup into a scan
of every file's footer; sorted and zstd-compressed, the hex text costs little more (measured).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Layout:
    """Row order and column encodings of one table's files."""

    sort_by: tuple[str, ...] = ()
    unique_columns: tuple[str, ...] = ()  # one distinct value per row: no dictionary
    delta_columns: tuple[str, ...] = ()  # int64 times: DELTA_BINARY_PACKED

    def arrange(self, data: pa.Table) -> pa.Table:
        """`data` in this layout's row order (a stable sort; columns it lacks are skipped, so
        tables written by an older schema version are arranged too)."""
        keys = [(name, "ascending") for name in self.sort_by if name in data.column_names]
        if not keys or data.num_rows < 2:
            return data
        return data.take(pc.sort_indices(data, sort_keys=keys))


SPAN_LAYOUT = Layout(
    sort_by=("trace_id", "start_time_unix_nano"),
    unique_columns=("span_id",),
    delta_columns=("start_time_unix_nano", "end_time_unix_nano"),
)
LOG_LAYOUT = Layout(
    sort_by=("trace_id", "time_unix_nano"),
    delta_columns=("time_unix_nano", "observed_time_unix_nano"),
)
METRIC_LAYOUT = Layout(
    sort_by=("metric_name", "time_unix_nano"),
    delta_columns=("start_time_unix_nano", "time_unix_nano"),
)
