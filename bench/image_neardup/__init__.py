"""pHash near-dup quality on planted copies, our pHash vs imagehash's, and `ImageIndex` lookup
time (`python -m bench.image_neardup`)."""
