"""Which landed files hold image-text pairs: WebDataset tars and Parquet files of image bytes.

A batch's modality is decided from its files before anything lands (`fm land`); a file is
image-text when its content says so (a tar whose members include images, a Parquet file with a
binary image column), never by its name alone.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from fm_assets.formats.image_text.parquet import image_column
from fm_assets.formats.image_text.records import IMAGE_EXTENSIONS
from fm_assets.formats.image_text.webdataset import sample_key
from fm_assets.formats.sniff import gunzip_prefix, is_gzip

WEBDATASET, PARQUET = "webdataset", "parquet"
IMAGE_TEXT_FORMATS: Final = (WEBDATASET, PARQUET)
PARQUET_MAGIC: Final = b"PAR1"
_TAR_MAGIC_OFFSET: Final = 257
_MEMBERS_LOOKED_AT: Final = 64  # a sample's members are consecutive: images show up early


def container_format(head: bytes) -> str | None:
    """ "webdataset" for a tar (plain or gzip), "parquet" for Parquet, else None: by content."""
    if head.startswith(PARQUET_MAGIC):
        return PARQUET
    content = gunzip_prefix(head) if is_gzip(head) else head
    if content[_TAR_MAGIC_OFFSET : _TAR_MAGIC_OFFSET + 5] == b"ustar":
        return WEBDATASET
    return None


def image_text_format(path: Path) -> str | None:
    """The image-text format of a local file ("webdataset" or "parquet"), or None when it is
    not one: a tar with no image among its first members, Parquet without image bytes."""
    with path.open("rb") as f:
        head = f.read(64 * 1024)
    kind = container_format(head)
    if kind == PARQUET:
        try:
            schema = pq.read_schema(path)
        except (pa.ArrowException, OSError):
            return PARQUET  # damaged: the raw stage quarantines it, naming the damage
        return PARQUET if image_column(schema) is not None else None
    if kind == WEBDATASET:
        try:
            with tarfile.open(path, mode="r:*") as archive:
                for number, member in enumerate(archive):
                    if number >= _MEMBERS_LOOKED_AT:
                        break
                    if member.isfile() and sample_key(member.name)[1] in IMAGE_EXTENSIONS:
                        return WEBDATASET
        except (tarfile.TarError, EOFError, OSError):
            return WEBDATASET  # damaged: read as far as it goes, the rest quarantined
        return None
    return None
