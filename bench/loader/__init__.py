"""fm_loader against upstream `streaming.StreamingDataset` and a raw memmap read, same shards.

`python -m bench.loader` (`__main__`) builds or reuses the shard sets (`sets`), then runs each
measurement and writes its section of `bench/results/loader.md`. A measurement is one module
with a `measure(...)` that returns its raw figures and a `section(...)` that renders them as
Markdown lines: `throughput` (1), `resume` (2), `feed` (3), `shm` (4) and `diagnostics` (where
the time goes). `readers` holds how each contestant opens and reads a set, `upstream` how
StreamingDataset is quieted and closed, `plan` the sample counts and repeats of a run. To add a
measurement, add such a module and call it from `__main__`.
"""
