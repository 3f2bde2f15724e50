"""The pinned requirements deploy/Dockerfile installs, read from pyproject.toml.

    python pins.py runtime pyproject.toml   # [project] dependencies + the `spark` extra
    python pins.py build pyproject.toml     # the build tools pinned in the `dev` extra

Standard library only: it runs on the builder image's bare Python before anything is installed.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

# what the builder stage needs besides the runtime: maturin builds native/, grpcio-tools
# generates the ConnectorService code from protos/ (`make native`, `make proto`)
BUILD_TOOLS = ("maturin", "grpcio-tools")


def _name(requirement: str) -> str:
    return requirement.split("==")[0].split("[")[0].strip().lower()


def requirements(kind: str, pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project["optional-dependencies"]
    if kind == "runtime":
        wanted = [*project["dependencies"], *extras["spark"]]
    elif kind == "build":
        wanted = [r for r in extras["dev"] if _name(r) in BUILD_TOOLS]
        missing = set(BUILD_TOOLS) - {_name(r) for r in wanted}
        if missing:
            raise SystemExit(f"pins.py: {', '.join(sorted(missing))} not in the dev extra")
    else:
        raise SystemExit(f"pins.py: unknown kind {kind!r} (runtime or build)")
    unpinned = [r for r in wanted if "==" not in r]
    if unpinned:
        raise SystemExit(f"pins.py: not pinned with ==: {', '.join(unpinned)}")
    return wanted


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    print("\n".join(requirements(argv[0], Path(argv[1]))))


if __name__ == "__main__":
    main(sys.argv[1:])
