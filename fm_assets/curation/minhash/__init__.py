"""MinHash LSH near-duplicate detection: `shingles` -> `signatures` -> `index`."""
