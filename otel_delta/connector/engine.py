"""Which engine runs an operation: delta-rs in-process by default, Spark for big tables."""

from __future__ import annotations

from typing import Literal

from otel_delta.errors import ConfigError

Engine = Literal["delta-rs", "spark"]
ENGINES: tuple[str, ...] = ("delta-rs", "spark")


def check_engine(engine: str) -> Engine:
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
    return engine  # type: ignore[return-value]
