"""Data-quality checks on document tables, independent of Dagster."""
