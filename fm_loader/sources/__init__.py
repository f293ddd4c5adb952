"""From what a trainer names ("web@v3", a directory, an `s3://` URI) to open, checked sets: the
catalog lookup, the startup checks, the markers beside a set (revocation, namespaces, runs) and
pre-warming a node's cache."""
