"""Registries by content hash: tokenizers and quality classifiers."""
