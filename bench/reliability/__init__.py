"""Reliability under faults, counted: crashes survived, faults injected, corrupt files found,
fuzz inputs tried, and the records each lost (goal: 0). `python -m bench.reliability`."""
