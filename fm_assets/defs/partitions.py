"""Partitions: landing batches, dataset versions, version x shard config, registry entries and
revocations."""

from __future__ import annotations

import dagster as dg

landing_batches = dg.DynamicPartitionsDefinition(name="landing_batch")
dataset_versions = dg.DynamicPartitionsDefinition(name="dataset_version")
shard_configs = dg.DynamicPartitionsDefinition(name="shard_config")  # "<tokenizer[:12]>-s<seq_len>"
shard_set_partitions = dg.MultiPartitionsDefinition(
    {"version": dataset_versions, "shard_config": shard_configs}
)
quality_classifiers = dg.DynamicPartitionsDefinition(name="quality_classifier")  # model sha256
benchmarks = dg.DynamicPartitionsDefinition(name="benchmark")  # contamination registry entries
revocations = dg.DynamicPartitionsDefinition(name="revocation")  # revocation id
