"""OpenLineage run events of the platform's materializations (docs/openlineage.md)."""
