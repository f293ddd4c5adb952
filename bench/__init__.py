"""Benchmarks and evaluations of the fm platform: run each from the repository root as
`python -m bench.<name>` (see bench/README.md); `bench.harness` holds what they share."""
