"""Key-sorted Parquet data files that a lookup reads by key: written sorted by one key column in
small row groups, each with the key's statistics and a split-block Bloom filter (`files`), and
read by keys through the manifest's bounds, the footer's statistics and the filters, so that
what a lookup reads follows its keys, not the table's size (`reads`). The near-dup index and
the exact-dedup index are laid out this way."""
