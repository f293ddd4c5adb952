"""How maintenance treats a catalog: how long history is kept, how old an unreferenced file must
be before it is deleted, and what counts as small (files, manifests)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from fm_assets.settings import Settings


@dataclass(frozen=True)
class MaintenancePolicy:
    """Settings of one maintenance run (`from_settings` fills the operator's)."""

    # A snapshot no version pins is expired once it stopped being current this long ago: a
    # reader that started on it (a stage, a version cut, a check) has finished by then.
    retention: dt.timedelta = dt.timedelta(days=7)
    # An unreferenced file is deleted once it is this old: a younger one may belong to a commit
    # still in progress (its writer writes the files first, then commits).
    grace: dt.timedelta = dt.timedelta(hours=24)
    small_file_bytes: int = 32 << 20  # a data file below this is merged with others
    min_files: int = 5  # small files of one partition that start a merge
    target_file_bytes: int = 128 << 20  # at most this many input bytes merged into one file
    max_partitions: int = 32  # partitions of one table merged per run (the rest: next run)
    manifest_entries: int = 20_000  # entries per manifest when manifests are merged
    merge_manifests_at: int = 16  # manifests of a snapshot that start a merge
    # Previous metadata files a table's metadata log keeps (Iceberg's
    # write.metadata.previous-versions-max, set by the expiry commit); older ones are deleted.
    metadata_versions: int = 10

    def __post_init__(self) -> None:
        if self.retention < dt.timedelta(0) or self.grace < dt.timedelta(0):
            raise ValueError(
                f"retention ({self.retention}) and grace ({self.grace}) must not be negative"
            )
        if (
            self.min_files < 2
            or self.manifest_entries < 1
            or self.merge_manifests_at < 2
            or (self.metadata_versions < 1)
        ):
            raise ValueError(
                "min_files and merge_manifests_at must be at least 2, manifest_entries and "
                "metadata_versions at least 1"
            )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        retention_hours: float | None = None,
        grace_hours: float | None = None,
    ) -> MaintenancePolicy:
        """The operator's settings (FM_MAINTENANCE_RETENTION_HOURS, FM_MAINTENANCE_GRACE_HOURS),
        or the hours given."""
        retention = (
            settings.maintenance_retention_hours if retention_hours is None else retention_hours
        )
        grace = settings.maintenance_grace_hours if grace_hours is None else grace_hours
        return cls(retention=dt.timedelta(hours=retention), grace=dt.timedelta(hours=grace))
