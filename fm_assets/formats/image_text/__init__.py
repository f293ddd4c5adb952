"""Landed image-text files -> pairs for the `raw_pairs` stage; nothing is lost silently.

    file bytes --sniff (ustar at byte 257, PAR1)--> format
        |
        +-- webdataset --> webdataset.py (tarfile, stream mode): a sample per key --+
        +-- parquet    --> parquet.py (img2dataset's columns): a sample per row   --+
                                                          PairRecord | UnreadableRecord <--+

Bad input never raises: each problem becomes an `UnreadableRecord` whose `rule` is a
`formats.Rule` or `PairRule` code and whose reason names the sample (its key or row).
"""

from fm_assets.formats.image_text.parquet import read_image_parquet
from fm_assets.formats.image_text.records import PairItem, PairRecord, PairRule
from fm_assets.formats.image_text.sniff import (
    IMAGE_TEXT_FORMATS,
    PARQUET,
    WEBDATASET,
    container_format,
    image_text_format,
)
from fm_assets.formats.image_text.webdataset import read_webdataset

__all__ = [
    "IMAGE_TEXT_FORMATS",
    "PARQUET",
    "WEBDATASET",
    "PairItem",
    "PairRecord",
    "PairRule",
    "container_format",
    "image_text_format",
    "read_image_parquet",
    "read_webdataset",
]
