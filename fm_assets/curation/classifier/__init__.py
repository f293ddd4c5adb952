"""The fastText quality classifier: `scoring`, `training`, and the default `recipe`'s data."""
