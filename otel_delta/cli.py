"""`otel-delta` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import signal
import sys
import threading

# heap first: it sets pyarrow's allocator before anything loads pyarrow (otel_delta/heap.py);
# grpcenv before anything imports grpc (otel_delta/grpcenv.py), rustenv before deltalake
# (otel_delta/rustenv.py)
from otel_delta import grpcenv, heap, rustenv  # noqa: F401 (grpcenv, rustenv: for their effect)
from otel_delta.backfill.files import FORMATS
from otel_delta.bridge import Bridge
from otel_delta.commands import add_commands, run_command
from otel_delta.config import Settings, check_serving, load_settings
from otel_delta.errors import Aborted, OtelDeltaError
from otel_delta.logformat import logs_held, route_stray_errors, use_json_logs
from otel_delta.nopandas import keep_pandas_unloaded
from otel_delta.status import status_for

log = logging.getLogger("otel_delta")


def raise_open_files_limit() -> None:
    """Every client connection holds a file descriptor: a soft limit of 1,024 (a common
    default) stalls Exports once that many collectors and SDKs are connected. Raise the soft
    limit to the hard one, as the Collector and Prometheus do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-files limit from %d: %s", soft, exc)


def _acknowledged(bridge: Bridge) -> str:
    """What an OK to an Export means, and where it leaves the request: said at start, since a
    deltalake.toml from before the write-ahead log (OK meant committed) keeps working but now
    gets the log's default, a directory that must outlive the process."""
    if bridge.wal is None:
        return "OK once committed (ack = commit)"
    return f"OK once in the write-ahead log in {bridge.wal.directory} (ack = wal)"


async def serve(settings: Settings) -> None:
    keep_pandas_unloaded()  # 47 MiB the bridge has no use for (otel_delta/nopandas.py)
    heap.trim_every()  # freed request bodies leave the process (otel_delta/heap.py)
    # handlers first: a SIGTERM right after the "listening" line (or during the WAL replay)
    # must still mean an orderly stop, not the default instant death; so does SIGHUP (the
    # terminal closed: there is no configuration reload to mean instead)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stopping() -> None:
        """The first signal: stop now, even mid-replay (the replay ends before its next
        record, `bridge.start` returns 0), within `stop_timeout_seconds` from here."""
        if stop.is_set():  # SIGHUP: systemd sends it right after SIGTERM
            return
        stop.set()
        log.info("stopping: committing buffered telemetry")
        # a second SIGTERM or Ctrl-C asks not to wait for the commits (a store that hangs
        # holds them until stop_timeout_seconds): leaving is as safe as then. Not SIGHUP:
        # systemd sends it right after SIGTERM (SendSIGHUP=yes), and a closed terminal after
        # a Ctrl-C
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, leave_now, bridge, "a second signal during the stop")
        exit_unless_stopped(bridge, settings.buffer.stop_timeout_seconds)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stopping)
    # (the handlers run on this loop, so not before `bridge` is set: its first await)
    bridge = Bridge(settings)
    if not await bridge.start(stop):  # stopped while it replayed the write-ahead log
        await bridge.stop()
        return
    assert bridge.grpc is not None
    doors = [f"{bridge.grpc.endpoint} (OTLP/gRPC)"]
    if bridge.http is not None:
        doors.append(f"{bridge.http.endpoint} (OTLP/HTTP)")
    # TLS is the OTLP doors' only: the admin endpoint is plain HTTP, which the line says, so
    # that "with TLS" after it is not read as the admin endpoint's
    listening = ", ".join(doors) + (" with TLS" if settings.receiver.tls.enabled else "")
    if bridge.admin is not None:
        listening += f", admin on {bridge.admin.endpoint} (plain HTTP)"
    log.info(
        "otel-delta listening on %s; writing Delta tables to %s; %s",
        listening,
        settings.deltalake.resolved_table_path(),
        _acknowledged(bridge),
    )
    await stop.wait()
    await bridge.stop()


def exit_unless_stopped(bridge: Bridge, seconds: float) -> None:
    """Exit the process if the stop has not finished after `seconds`. A store that accepts
    connections and never answers holds each commit for as long as its client's timeouts and
    retries allow (minutes), in threads nothing can interrupt; what was acknowledged is in the
    write-ahead log, so leaving now is as safe as `kill -9`, and says why."""

    def give_up() -> None:
        leave_now(
            bridge,
            f"stop did not finish within {seconds:.0f} s (a commit does not return: is the "
            f"{'disk' if bridge.engines.lakehouse.is_local else 'object store'}"
            f"{' or Spark' if bridge.engines.spark.started else ''} answering?)",
        )

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True  # a stop that finishes in time exits without waiting for it
    timer.start()


def leave_now(bridge: Bridge, why: str) -> None:
    """Exit at once with code 1, in one line saying `why` and what is left where: what was
    acknowledged is in the write-ahead log (or, with ack = commit, was committed)."""
    left = (
        f"{bridge.wal.pending_records} logged request(s) stay in the write-ahead log "
        "for the next start"
        if bridge.wal is not None
        else "requests whose rows were not committed were not acknowledged"
    )
    log.error("%s; %s; exiting", why, left)
    logging.shutdown()
    os._exit(1)


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", help="path to deltalake.toml (default: ./deltalake.toml if present)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="otel-delta", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="run the OTLP (gRPC and HTTP) → Delta bridge")
    _add_config(serve_cmd)
    serve_cmd.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    add_commands(commands, _add_config)
    backfill_cmd = commands.add_parser(
        "backfill", help="load OpenTelemetry Collector file-exporter output into the tables"
    )
    backfill_cmd.add_argument("paths", nargs="+", metavar="PATH", help="files or directories")
    backfill_cmd.add_argument(
        "--format",
        default="auto",
        choices=FORMATS,
        help="OTLP/JSON lines or length-prefixed protobuf (default: detect per file)",
    )
    _add_config(backfill_cmd)
    backfill_cmd.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING"]
    )
    stream_cmd = commands.add_parser(
        "stream", help="stream OTLP messages from Kafka into the tables (Spark, exactly once)"
    )
    _add_config(stream_cmd)
    stream_cmd.add_argument(
        "--once", action="store_true", help="process what the topics hold now, then exit"
    )
    stream_cmd.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    return parser


def run_stream(settings: Settings, args: argparse.Namespace) -> None:
    from otel_delta.stream.job import run_stream as stream

    stream(settings, once=args.once)


def run_backfill(settings: Settings, args: argparse.Namespace) -> None:
    from otel_delta.backfill.run import backfill, summary

    report = backfill(settings, args.paths, args.format)
    print(summary(report, settings.deltalake.resolved_table_path()))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    route_stray_errors()
    try:
        if args.command not in ("serve", "backfill", "stream"):
            return run_command(args)
        with logs_held() as held:
            settings = load_settings(args.config)
        if settings.logging.format == "json":
            use_json_logs()
        held.write_out()
        if args.command == "backfill":
            run_backfill(settings, args)
        elif args.command == "stream":
            run_stream(settings, args)
        else:
            check_serving(settings, args.config)
            raise_open_files_limit()
            asyncio.run(serve(settings))
    except Aborted:
        print("otel-delta: aborted", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C in a table command (serve and stream stop in order)
        print("otel-delta: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # whoever read our output went away (`| head`): quietly, as Unix
        # tools end by SIGPIPE; what is still buffered for stdout must not fail again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OtelDeltaError as exc:
        print(f"otel-delta: {exc}", file=sys.stderr)
        return exit_code(exc)
    except Exception as exc:  # table commands: a library failure is one line too, not a trace
        if args.command == "serve":
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"otel-delta: {args.command} failed: {type(exc).__name__}: {first}", file=sys.stderr)
        return 1
    return 0


def exit_code(error: OtelDeltaError) -> int:
    """1 for an operation that failed (a store down, a commit that lost its races, a server
    fault: the same command can succeed later), 2 for input the command cannot take (a bad
    argument or config, a table that is not there): the status the ConnectorService answers
    the same error with (otel_delta.status) tells them apart."""
    status = status_for(error)
    return 1 if status.retryable or status.http == 409 or status.http >= 500 else 2


def run() -> None:
    """The `otel-delta` entry point: `main`, then exit without interpreter teardown.

    By then every commit is done and the output is flushed here. Arrow's native thread pools
    can abort the process (SIGABRT, "terminate called without an active exception") while the
    interpreter tears down after a scan, turning a finished command into a failed one.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
