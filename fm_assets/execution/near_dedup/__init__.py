"""Near dedup on Ray: MinHash LSH decided against the data namespace's `neardup_index`.

`run` decides a batch (spread over the cluster, or in one task on a small batch: `one_task`);
`tasks` and `writes` are its Ray tasks; `lookup` reads the index rows a batch needs;
`compaction` and `migration` keep the index's files in shape.
"""
