"""Quoting for the two SQL dialects our conditions are rendered in: DataFusion (delta-rs) and
Spark SQL. The connector's predicates and the engines both quote through here."""

from __future__ import annotations

from typing import Literal

Dialect = Literal["datafusion", "spark"]


def quote_string(value: str, dialect: Dialect) -> str:
    if dialect == "spark":  # Spark string literals process backslash escapes
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return "'" + value.replace("'", "''") + "'"


def quote_identifier(name: str, dialect: Dialect) -> str:
    if dialect == "spark":
        return "`" + name.replace("`", "``") + "`"
    return '"' + name.replace('"', '""') + '"'
