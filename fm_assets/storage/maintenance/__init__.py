"""Catalog maintenance: expire snapshots no version pins, compact small data files, merge
manifests, delete files no live snapshot references (`fm maintain`, the `catalog_maintenance`
job). What is kept and why, and the safety argument: docs/maintenance.md.

The package imports nothing at load time: `storage.batch_history` reads the expired-snapshot
history (`maintenance.history`) on every stage commit and must not pull in the rest.
"""
