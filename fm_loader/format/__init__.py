"""What is on disk: the manifests that complete a set, MDS shards read in place and verified.

Reads local files only and imports nothing else of the loader (no torch, no pyiceberg): the
platform's writer uses the same contracts.
"""
