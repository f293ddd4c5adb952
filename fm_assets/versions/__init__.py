"""Dataset versions: immutable cuts over the curated tables, and their contamination scans."""
