"""What an image-text file turns into: pairs, unreadable samples, and their numbering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fm_assets.formats.records import RecordNumbering, UnreadableRecord

# Image file extensions a WebDataset sample or an img2dataset Parquet column may carry.
IMAGE_EXTENSIONS: Final = ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff")
CAPTION_EXTENSIONS: Final = ("txt", "caption")
METADATA_EXTENSION: Final = "json"


@dataclass(frozen=True)
class PairRecord:
    """One image with its caption, as landed: the image's bytes are not decoded here."""

    index: int  # 0-based position among all items (pairs and unreadable samples) of the file
    key: str  # the sample's key: the WebDataset key, or img2dataset's `key` column
    image: bytes
    image_name: str  # the tar member (`000001.jpg`) or the Parquet column (`jpg`) it came from
    image_extension: str  # declared by the member name or column: "jpg", "png", ...
    caption: str
    metadata_json: str | None  # the sample's `.json` member or other Parquet columns, as JSON
    url: str | None
    offset: int | None = None  # tar: byte offset of the image member's header in the file
    row: int | None = None  # Parquet: the row's 0-based index in the file


class PairRule:
    """The codes an unreadable sample of an image-text file takes (besides `formats.Rule`)."""

    MISSING_IMAGE: Final = "missing_image"  # a sample with a caption but no image member
    MISSING_CAPTION: Final = "missing_caption"  # an image with no caption member or field
    FAILED_DOWNLOAD: Final = "failed_download"  # img2dataset's status is not "success"
    CORRUPT_TAR: Final = "corrupt_tar"  # not a tar archive, or a damaged header
    CORRUPT_PARQUET: Final = "corrupt_parquet"  # not Parquet, or unreadable row groups
    NO_IMAGE_COLUMN: Final = "no_image_column"  # a Parquet file without image bytes
    SAMPLE_TOO_LARGE: Final = "sample_too_large"


PairItem = PairRecord | UnreadableRecord


class PairNumbering(RecordNumbering):
    """Numbers the items of one file 0, 1, 2, ... in creation order, pairs and unreadable alike."""

    def pair(self, **fields: object) -> PairRecord:
        record = PairRecord(index=self.count, **fields)  # type: ignore[arg-type]
        self.count += 1
        return record
