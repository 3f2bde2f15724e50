"""The connector API: operate on the telemetry lakehouse from Python.

from otel_delta import DeltaLakeConnector, DeltaConfig
lake = DeltaLakeConnector(DeltaConfig.from_toml("deltalake.toml"))
spans = lake.table("spans")
spans.query().filter("service_name = 'checkout' AND duration_ns > 1e6").to_arrow()
"""

from otel_delta.connector.config import DeltaConfig
from otel_delta.connector.connector import DeltaLakeConnector
from otel_delta.connector.predicates import Predicate, parse_predicate
from otel_delta.connector.query import Query
from otel_delta.connector.results import (
    DeleteResult,
    HistoryEntry,
    InsertResult,
    OptimizeResult,
    QueryResult,
    RestoreResult,
    ScanStats,
    SchemaChange,
    TableMetadata,
    TableStatistics,
    UpsertResult,
    VacuumResult,
)
from otel_delta.connector.table import Table
from otel_delta.engines import ENGINES, EngineName

__all__ = [
    "ENGINES",
    "DeleteResult",
    "DeltaConfig",
    "DeltaLakeConnector",
    "EngineName",
    "HistoryEntry",
    "InsertResult",
    "OptimizeResult",
    "Predicate",
    "Query",
    "QueryResult",
    "RestoreResult",
    "ScanStats",
    "SchemaChange",
    "Table",
    "TableMetadata",
    "TableStatistics",
    "UpsertResult",
    "VacuumResult",
    "parse_predicate",
]
