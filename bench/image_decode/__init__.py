"""Decode + validate + resize + pHash: the decode stage vs img2dataset's resizer and
`imagehash.phash` on the same images (`python -m bench.image_decode`)."""
