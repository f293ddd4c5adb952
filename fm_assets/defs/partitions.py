"""Partitions: landing batches, dataset versions, version x shard config, registry entries and
revocations; and adding keys to them safely from several processes at once."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg
from sqlalchemy.exc import IntegrityError

landing_batches = dg.DynamicPartitionsDefinition(name="landing_batch")
dataset_versions = dg.DynamicPartitionsDefinition(name="dataset_version")
shard_configs = dg.DynamicPartitionsDefinition(name="shard_config")  # "<tokenizer[:12]>-s<seq_len>"
shard_set_partitions = dg.MultiPartitionsDefinition(
    {"version": dataset_versions, "shard_config": shard_configs}
)
quality_classifiers = dg.DynamicPartitionsDefinition(name="quality_classifier")  # model sha256
benchmarks = dg.DynamicPartitionsDefinition(name="benchmark")  # contamination registry entries
revocations = dg.DynamicPartitionsDefinition(name="revocation")  # revocation id

# Each lost race adds at least one key, so this many rounds covers that many racing writers.
_ADD_ROUNDS = 8


def add_partition_keys(
    instance: dg.DagsterInstance,
    partitions_def: dg.DynamicPartitionsDefinition,
    keys: Sequence[str],
) -> None:
    """Add `keys` to a dynamic partitions definition; keys already there are left alone.

    Dagster adds keys by looking up which exist and inserting the others, so two processes adding
    the same new key at once (two sensor runs that both trained the default quality classifier)
    both insert it and the later insert fails on the table's unique key. The key is there then:
    this looks again and adds only what is still missing.
    """
    name = partitions_def.name
    if name is None:
        raise ValueError("only named dynamic partitions can be added to")
    missing = list(dict.fromkeys(keys))
    for _ in range(_ADD_ROUNDS):
        try:
            instance.add_dynamic_partitions(name, missing)
            return
        except IntegrityError:
            present = instance.get_existing_dynamic_partitions(name, missing)
            missing = [key for key in missing if key not in present]
            if not missing:
                return
    instance.add_dynamic_partitions(name, missing)  # raises what still stands in the way
