"""Dataset cards: counts, drop waterfall, dedup, PII and length plots, as Markdown."""
