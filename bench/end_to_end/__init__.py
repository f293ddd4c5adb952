"""End to end against DataTrove: the same unique WARC replicas through DataTrove's FineWeb-style
pipeline and through the platform's `fm` commands, interleaved. See `bench/README.md`."""
