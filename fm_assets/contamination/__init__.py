"""Eval-set contamination: normalisation, the registry's hashes, and the matcher."""
