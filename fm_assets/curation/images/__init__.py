"""Image curation building blocks: decode and validate, hash (pixels, pHash), resize and
re-encode, and the model scorers; pure functions over bytes and Pillow images, no I/O."""
