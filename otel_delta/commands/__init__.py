"""The table commands of `otel-delta` (everything but `serve`): arguments and dispatch."""

from otel_delta.commands.registry import COMMANDS, add_commands, run_command

__all__ = ["COMMANDS", "add_commands", "run_command"]
