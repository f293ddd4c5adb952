"""Partitions: one per landing batch, one per dataset version, and version x shard config."""

from __future__ import annotations

import dagster as dg

landing_batches = dg.DynamicPartitionsDefinition(name="landing_batch")
dataset_versions = dg.DynamicPartitionsDefinition(name="dataset_version")
shard_configs = dg.DynamicPartitionsDefinition(name="shard_config")  # "<tokenizer[:12]>-s<seq_len>"
shard_set_partitions = dg.MultiPartitionsDefinition(
    {"version": dataset_versions, "shard_config": shard_configs}
)
