"""The Dagster code location: `dagster dev -w workspace.yaml` loads `defs` from here."""

from fm_assets.defs import build_definitions

defs = build_definitions()
