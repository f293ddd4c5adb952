"""Shard sets: packing a version into sequences and writing them as MDS shards."""
