"""One table of commands: name, help, arguments and the function that runs it.

Each command function gets the connector and the parsed arguments and returns what to print
(formatted by commands/output.py) or lines of text, so cli.py stays a thin entry point.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_delta.commands import table_ops
from otel_delta.commands.output import FORMATS, render
from otel_delta.commands.waterfall import MIN_WIDTH
from otel_delta.config import load_settings


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Any, argparse.Namespace], Any]
    formats: bool = True  # takes --format


def _table(p: argparse.ArgumentParser) -> None:
    p.add_argument("table", help="spans, logs, metrics_gauge, metrics_sum, ...")


def _yes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


def _query_args(p: argparse.ArgumentParser) -> None:
    _table(p)
    p.add_argument("--where", help="SQL-like condition, e.g. \"service_name = 'api'\"")
    p.add_argument("--select", help="comma-separated columns")
    p.add_argument(
        "--order-by",
        help='comma-separated columns, each with DESC for descending, e.g. "time DESC"',
    )
    p.add_argument("--limit", type=int, default=100, help="rows to print (default 100; 0 = all)")
    travel = p.add_mutually_exclusive_group()
    travel.add_argument("--version", type=int, help="time travel to this table version")
    travel.add_argument("--as-of", help="time travel to this timestamp (ISO 8601)")


def _history_args(p: argparse.ArgumentParser) -> None:
    _table(p)
    p.add_argument("--limit", type=int, default=20, help="newest commits to print (default 20)")


def _optimize_args(p: argparse.ArgumentParser) -> None:
    _table(p)
    p.add_argument(
        "--z-order",
        action="extend",
        nargs="+",
        default=[],
        metavar="COL",
        help="columns to cluster by: --z-order trace_id span_id (or the flag repeated)",
    )
    p.add_argument("--where", help="partition condition, e.g. \"date < '2026-11-01'\"")


def _vacuum_args(p: argparse.ArgumentParser) -> None:
    _table(p)
    p.add_argument("--retention-hours", type=int, help="default: deltalake.table.retention_hours")
    p.add_argument("--dry-run", action="store_true", help="list the files, delete nothing")
    _yes(p)


def _restore_args(p: argparse.ArgumentParser) -> None:
    _table(p)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--version", type=int, help="the version to restore")
    target.add_argument("--timestamp", help="the table as it was then (ISO 8601)")
    _yes(p)


def _scope(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--where", help=f"rows to {what} (SQL-like condition)")
    p.add_argument(
        "--partition-path",
        help="only this partition, e.g. service_name=web/date=2026-11-20 (alone: all its rows)",
    )


def _actor(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--actor",
        type=str,
        default=None,
        help="who asks, for the _audit record (default: the OS user)",
    )


def _delete_args(p: argparse.ArgumentParser) -> None:
    _table(p)
    _scope(p, "delete")
    p.add_argument(
        "--hard",
        action="store_true",
        help="also remove every file and log entry that held the rows, at once (no time "
        "travel back; needs the [privacy] hash key; audited)",
    )
    _actor(p)
    _yes(p)


def _redact_args(p: argparse.ArgumentParser) -> None:
    _table(p)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--attribute", help="an attribute key, e.g. user.email")
    target.add_argument("--pattern", help="a regular expression, in attribute values and bodies")
    p.add_argument("--mode", choices=("hash", "mask", "drop"), default="hash")
    _scope(p, "redact")
    _actor(p)
    _yes(p)


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace_id", help="32 hex digits")
    p.add_argument(
        "--width",
        type=_waterfall_width,
        default=0,
        help=f"columns, at least {MIN_WIDTH} (default: the terminal's)",
    )


def _waterfall_width(text: str) -> int:
    """`--width`: a waterfall narrower than MIN_WIDTH would wrap its every line."""
    try:
        width = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of columns: {text!r}") from None
    if width < MIN_WIDTH:
        raise argparse.ArgumentTypeError(f"{width} columns: a waterfall needs at least {MIN_WIDTH}")
    return width


COMMANDS: tuple[Command, ...] = (
    Command("tables", "list the tables with their size", lambda p: None, table_ops.tables),
    Command("query", "read rows (filter, columns, time travel)", _query_args, table_ops.query),
    Command("history", "commits of a table, newest first", _history_args, table_ops.history),
    Command("stats", "size, files, partitions, rows, small files", _table, table_ops.stats),
    Command(
        "optimize", "compact small files, optionally Z-order", _optimize_args, table_ops.optimize
    ),
    Command("vacuum", "delete files no longer referenced", _vacuum_args, table_ops.vacuum),
    Command("restore", "roll a table back to a version", _restore_args, table_ops.restore),
    Command("delete", "delete the rows matching a condition", _delete_args, table_ops.delete),
    Command(
        "redact",
        "rewrite an attribute or a pattern in place (keyed hash, mask or drop), then purge",
        _redact_args,
        table_ops.redact,
    ),
    Command("trace", "draw one trace as a waterfall", _trace_args, table_ops.trace, formats=False),
)


def add_commands(commands: argparse._SubParsersAction, add_config: Callable) -> None:
    for command in COMMANDS:
        parser = commands.add_parser(command.name, help=command.help)
        command.arguments(parser)
        add_config(parser)
        parser.add_argument(
            "--format",
            choices=FORMATS if command.formats else ("waterfall", *FORMATS),
            default="table" if command.formats else "waterfall",
        )


def run_command(args: argparse.Namespace) -> int:
    """Run a table command; raises OtelDeltaError (printed as one line by cli.main)."""
    from otel_delta.connector import DeltaLakeConnector

    command = next(c for c in COMMANDS if c.name == args.command)
    settings = load_settings(args.config)
    lakehouse = settings.deltalake.resolved_table_path()
    defaults = args.config is None and not Path("deltalake.toml").is_file()
    if defaults and "://" not in lakehouse and not Path(lakehouse).exists():
        # the defaults, and nothing there: say where it looked, or `(no rows)` misleads
        print(
            f"otel-delta: no deltalake.toml here and no lakehouse at {lakehouse}: "
            "pass --config (the file the bridge runs with)",
            file=sys.stderr,
        )
    connector = DeltaLakeConnector(settings)
    result = command.run(connector, args)
    lines = result if isinstance(result, table_ops.Lines) else [render(result, args.format)]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
