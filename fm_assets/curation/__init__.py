"""Curation stages' building blocks: language ID, quality rules and classifier, near-dedup, PII."""
