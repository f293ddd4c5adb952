"""Execution: the stage list, connecting to Ray, and running one stage for one batch."""
