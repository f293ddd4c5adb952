"""Serving one rank's stream: the datasets, the loader and its worker processes, the shared-memory
hand-over, the metrics and the stall probe."""
