"""`DeltaConfig`: the server's settings model (one model for the bridge and the connector)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from otel_delta.config import Settings, invalid_settings, load_settings


class DeltaConfig(Settings):
    """The same settings as `deltalake.toml` / `otel-delta serve`, with connector shortcuts.

    Any `otel_delta.config.Settings` is accepted where a DeltaConfig is expected.
    """

    @classmethod
    def from_toml(cls, path: str | Path) -> DeltaConfig:
        """Load `path` plus environment overrides (ConfigError with one line if invalid)."""
        settings = load_settings(path)
        fields = {name: getattr(settings, name) for name in Settings.model_fields}
        return cls.model_construct(**fields)

    @classmethod
    def for_path(cls, table_path: str | Path, **deltalake: Any) -> DeltaConfig:
        """Defaults with the lakehouse at `table_path` (plus any `[deltalake]` overrides);
        ConfigError with one line if invalid, as from a file."""
        try:
            return cls(deltalake={"table_path": str(table_path), **deltalake})
        except ValidationError as exc:
            raise invalid_settings(exc) from None
