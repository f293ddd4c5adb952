"""Purging revoked documents from what storage holds (`fm purge`, docs/provenance.md).

    scope.py          which rows a purge removes: whole batches, (batch, document) pairs, and
                      documents of tables that name no batch
    rows.py           one Parquet data file rewritten without those rows, row groups kept
    snapshots.py      a table's live snapshots rewritten in place (same ids, same lineage) over
                      the rewritten files, in one commit with a new head; the old files deleted
    commit.py         the catalog update that swaps a snapshot's manifest list in place
    landing_files.py  landed files: deleted when a purge covers them whole, else records blanked
                      in place where the format allows it; what each landed file holds now
    records.py        the audit tables: `purges`, `purged_documents`, `version_purges`

The orchestration (finding the documents, shard and text sets, caches, versions' marks) lives in
`fm_assets/shards/purge.py`: it needs the layers above storage.
"""
