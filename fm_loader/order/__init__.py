"""Which sample comes when, and who serves it: the mixture schedule, the per-source order, the
placement on ranks and workers, and the checkpoint states that pin them. Pure functions of
their arguments; imports nothing else of the loader."""
