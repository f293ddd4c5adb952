"""Data checks as plain functions over the catalog and the object store; `table` declares them."""
