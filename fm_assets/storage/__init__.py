"""Object store, Iceberg catalog and table schemas, landing zone."""
