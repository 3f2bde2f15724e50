"""Which files a backfill loads, and what it loaded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from otel_delta.backfill.stage import file_sha256, nothing_decoded
from otel_delta.errors import BackfillError


@dataclass(frozen=True)
class PlannedFile:
    path: str
    sha256: str


def expand(paths: list[str]) -> list[str]:
    """Files named, and the files under directories named (sorted), in the order given."""
    found: list[str] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            found.extend(str(p.resolve()) for p in sorted(path.rglob("*")) if p.is_file())
        elif path.is_file():
            found.append(str(path.resolve()))
        else:
            raise BackfillError(f"backfill: {raw}: no such file or directory")
    return found


def plan(paths: list[str], already_loaded: set[str]) -> tuple[list[PlannedFile], int]:
    """New files (first of each distinct content), and how many were skipped as loaded/dupes."""
    seen = set(already_loaded)
    new: list[PlannedFile] = []
    skipped = 0
    for path in expand(paths):
        try:
            digest = file_sha256(path)
        except OSError as exc:
            raise BackfillError(f"backfill: {path}: {exc.strerror or exc}") from None
        if digest in seen:
            skipped += 1
            continue
        seen.add(digest)
        new.append(PlannedFile(path, digest))
    return new, skipped


def not_loaded(files: list[PlannedFile], already_loaded: set[str]) -> tuple[list[PlannedFile], int]:
    """`plan`'s files without those loaded since it ran (another run's), and how many."""
    new = [f for f in files if f.sha256 not in already_loaded]
    return new, len(files) - len(new)


@dataclass
class Loaded:
    """Counts of one backfill run.

    `files` are recorded in the ledger; `not_loaded` are files that gave nothing but dead
    letters (`stage.nothing_decoded`), left for a later run to load.
    """

    rows: dict[str, int] = field(default_factory=dict)
    files: list[dict] = field(default_factory=list)
    not_loaded: list[dict] = field(default_factory=list)
    skipped_commits: list[str] = field(default_factory=list)

    def add_file(
        self,
        planned: PlannedFile,
        records: int,
        rows: int,
        rejected: int,
        dead_letters: int,
        decoded: int,
    ) -> None:
        into = self.not_loaded if nothing_decoded(decoded, dead_letters) else self.files
        into.append(
            {
                "file_sha256": planned.sha256,
                "file": planned.path,
                "records": records,
                "rows": rows,
                "rejected": rejected,
                "dead_letters": dead_letters,
            }
        )

    def recorded_elsewhere(self) -> Loaded:
        """These counts without the loaded files, which another run recorded in the ledger
        (the same files, loaded at the same time) and counts itself; the files not loaded
        stay, as a re-run would read them again."""
        return Loaded(not_loaded=self.not_loaded)

    @property
    def total_rows(self) -> int:
        return sum(f["rows"] for f in self.files)

    def total(self, key: str) -> int:
        """Over every file read, loaded or not (a file not loaded has no rows)."""
        return sum(f[key] for f in self.files + self.not_loaded)
