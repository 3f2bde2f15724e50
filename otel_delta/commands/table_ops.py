"""The command bodies: thin calls into the connector API, plus confirmation of destructive ones."""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import os
import re
import shutil
import sys
from typing import Any

from otel_delta.commands.confirm import confirm
from otel_delta.commands.waterfall import render_waterfall
from otel_delta.errors import UsageError

TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


class Lines(list):
    """Text already laid out for the terminal (printed as is, not through a formatter)."""


def os_user() -> str:
    """The OS user running the command, for an audit record: its login name, else its uid.
    A container run as a uid without a passwd entry (an OpenShift random uid, `docker run
    --user 1000`) has no name, and getpass's KeyError ended every command in a traceback
    while the parser was built."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid:{os.getuid()}"


def tables(connector: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for name in connector.list_tables():
        stats = connector.table(name).statistics()
        rows.append({"table": name, **dataclasses.asdict(stats)})
    return rows


def query(connector: Any, args: argparse.Namespace) -> Any:
    q = connector.table(args.table).query()
    if args.where:
        q = q.filter(args.where)
    if args.select:
        q = q.select([c.strip() for c in args.select.split(",") if c.strip()])
    if args.order_by:
        q = q.order_by(*(c.strip() for c in args.order_by.split(",") if c.strip()))
    if args.limit:
        q = q.limit(args.limit)
    if args.version is not None:
        q = q.version(args.version)
    if args.as_of:
        q = q.as_of(args.as_of)
    return q.to_arrow()


def history(connector: Any, args: argparse.Namespace) -> Any:
    return connector.table(args.table).history(args.limit)


def stats(connector: Any, args: argparse.Namespace) -> Any:
    return connector.table(args.table).statistics()


def optimize(connector: Any, args: argparse.Namespace) -> Any:
    return connector.table(args.table).optimize(where=args.where, z_order=args.z_order or None)


def vacuum(connector: Any, args: argparse.Namespace) -> Any:
    table = connector.table(args.table)
    hours = args.retention_hours
    if hours is None:
        hours = connector.config.deltalake.table.retention_hours
    if not args.dry_run:
        confirm(f"vacuum {args.table}: delete unreferenced files older than {hours}h", yes=args.yes)
    result = table.vacuum(retention_hours=hours, dry_run=args.dry_run)
    if args.dry_run:
        return [{"file": f} for f in result.files]
    return {"table": args.table, "files_deleted": result.count, "retention_hours": hours}


def restore(connector: Any, args: argparse.Namespace) -> Any:
    table = connector.table(args.table)
    target = (
        f"version {args.version}" if args.version is not None else f"its state at {args.timestamp}"
    )
    confirm(f"restore {args.table} from version {table.version()} to {target}", yes=args.yes)
    if args.version is not None:
        return table.restore(args.version)
    return table.restore(timestamp=args.timestamp)


def _selected(table: Any, args: argparse.Namespace) -> Any:
    """The query of the rows --where and --partition-path select (checked now, so a bad one
    fails before anyone is asked anything)."""
    query = table.query()
    if args.partition_path:
        query = query.filter(table.partition(args.partition_path))
    if args.where is not None:
        query = query.filter(args.where)
    return query


def delete(connector: Any, args: argparse.Namespace) -> Any:
    table = connector.table(args.table)
    if args.where is None and args.partition_path is None:
        raise UsageError("delete needs --where, --partition-path or both")
    selected = _selected(table, args)
    if args.hard:
        connector.config.privacy.resolved_key()
    if not args.yes:
        what = " and ".join(filter(None, [args.where, args.partition_path]))
        kind = "hard-delete (no time travel back)" if args.hard else "delete"
        confirm(f"{kind} {selected.count()} row(s) from {args.table}: {what}", yes=False)
    return table.delete(
        args.where,
        partition_path=args.partition_path,
        hard=args.hard,
        actor=args.actor or os_user(),
    )


def redact(connector: Any, args: argparse.Namespace) -> Any:
    table = connector.table(args.table)
    selected = _selected(table, args)
    connector.config.privacy.resolved_key()
    if not args.yes:
        target = f"attribute {args.attribute}" if args.attribute else "a pattern"
        confirm(
            f"redact ({args.mode}) {target} in up to {selected.count()} row(s) of "
            f"{args.table}, then purge the old files (no time travel back)",
            yes=False,
        )
    return table.redact(
        args.attribute,
        pattern=args.pattern,
        mode=args.mode,
        where=args.where,
        partition_path=args.partition_path,
        actor=args.actor or os_user(),
    )


def trace(connector: Any, args: argparse.Namespace) -> Any:
    trace_id = args.trace_id.strip().lower()
    if not TRACE_ID.match(trace_id):
        raise UsageError(f"trace id must be 32 hex digits, got {args.trace_id!r}")
    spans = connector.trace(trace_id)
    if args.format != "waterfall":
        return spans
    if spans.num_rows == 0:
        return Lines([f"no spans for trace {trace_id}"])
    width = args.width or shutil.get_terminal_size((120, 24)).columns
    return Lines(render_waterfall(spans, width=width, color=sys.stdout.isatty()))
