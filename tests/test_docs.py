from pathlib import Path

from otel_delta.tables.docs import render

ROOT = Path(__file__).resolve().parents[1]


def test_schema_doc_is_current() -> None:
    """docs/schema.md is generated from the schemas; regenerate it when they change."""
    assert (ROOT / "docs" / "schema.md").read_text() == render()
