"""The Delta engines: delta-rs and Spark, two implementations of one interface (`Engine`),
chosen in one place (`Engines.pick`)."""

from otel_delta.engines.base import ENGINES, Engine, EngineName, TableWriter, check_engine
from otel_delta.engines.choice import Engines
from otel_delta.engines.delta_rs import DeltaRsEngine
from otel_delta.engines.spark import SparkEngine

__all__ = [
    "ENGINES",
    "DeltaRsEngine",
    "Engine",
    "EngineName",
    "Engines",
    "SparkEngine",
    "TableWriter",
    "check_engine",
]
