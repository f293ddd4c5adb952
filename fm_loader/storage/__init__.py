"""Reaching sets where they are published: local paths and `s3://` URIs, retries of what can
pass, verified downloads, and the node-local cache of remote sets (quota, pins, eviction)."""
