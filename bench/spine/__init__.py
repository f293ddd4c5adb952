"""Spine benchmark: landing -> four curation stages on Ray -> dataset version -> MDS shards.

`python -m bench.spine` writes `bench/RESULTS.md`; `run` makes every measurement in one pass on
one Ray, and each figure has its module: `stages` (1. end-to-end stages), `tokenize_ab` and
`tokenize_profile` (2. the tokenize stage against the library, and where its time goes),
`shards` (3. MDS shard write).
"""
