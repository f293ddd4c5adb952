"""Cost attribution: what each team's batches cost in storage, node cache and compute."""
