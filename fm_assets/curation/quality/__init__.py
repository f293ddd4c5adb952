"""Heuristic quality rules: Gopher, C4 and FineWeb scores (`scores`), decisions (`thresholds`)."""
