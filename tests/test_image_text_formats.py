"""Reading image-text files as the field writes them: WebDataset tars and img2dataset Parquet,
whole or damaged; every sample is a pair or an unreadable item saying why."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from fm_assets.formats.image_text import (
    PARQUET,
    WEBDATASET,
    PairRecord,
    image_text_format,
    read_image_parquet,
    read_webdataset,
)
from fm_assets.formats.records import UnreadableRecord
from tests.image_data import Sample, photo_samples, write_parquet, write_webdataset

MAX = 8 << 20


def _read_tar(path: Path) -> list[PairRecord | UnreadableRecord]:
    with path.open("rb") as f:
        return list(read_webdataset(f, MAX))


def test_a_webdataset_tar_reads_as_pairs_with_their_members(tmp_path: Path) -> None:
    samples = photo_samples(("astronaut", "coffee", "rocket"))
    items = _read_tar(write_webdataset(tmp_path / "00000.tar", samples))
    assert [i.index for i in items] == [0, 1, 2]
    assert all(isinstance(i, PairRecord) for i in items)
    first = items[0]
    assert isinstance(first, PairRecord)
    assert first.key == samples[0].key and first.image == samples[0].image
    assert first.image_name == f"{samples[0].key}.jpg" and first.image_extension == "jpg"
    assert first.caption == samples[0].caption
    assert first.url == "https://images.example.org/astronaut.jpg"
    assert json.loads(first.metadata_json or "{}")["name"] == "astronaut"
    # The offset is the image member's header: the tar module finds the same member there.
    with tarfile.open(tmp_path / "00000.tar") as archive:
        member = archive.getmember(first.image_name)
        assert member.offset == first.offset


def test_samples_missing_a_part_are_unreadable_items_naming_the_sample(tmp_path: Path) -> None:
    image = photo_samples(("moon",))[0].image
    samples = [
        Sample("a", image, caption="A photo of the moon"),
        Sample("b", None, caption="a caption without its image"),
        Sample("c", image, caption=None),  # the JSON carries no caption either
        Sample("d", image, caption="fine again"),
    ]
    items = _read_tar(write_webdataset(tmp_path / "x.tar", samples))
    rules = [i.rule if isinstance(i, UnreadableRecord) else "pair" for i in items]
    assert rules == ["pair", "missing_image", "missing_caption", "pair"]
    missing = items[2]
    assert isinstance(missing, UnreadableRecord)
    assert (
        "sample c" in missing.reason
        and missing.raw_sha256 == hashlib.sha256(image or b"").hexdigest()
    )


def test_a_truncated_tar_keeps_the_samples_before_the_damage(tmp_path: Path) -> None:
    path = write_webdataset(
        tmp_path / "whole.tar", photo_samples(("astronaut", "coffee", "rocket"))
    )
    data = path.read_bytes()
    cut = tmp_path / "cut.tar"
    with tarfile.open(path) as archive:
        third = archive.getmember("000000002.jpg")
    cut.write_bytes(data[: third.offset_data + 100])  # inside the third image
    items = _read_tar(cut)
    assert [type(i).__name__ for i in items] == ["PairRecord", "PairRecord", "UnreadableRecord"]
    last = items[-1]
    assert isinstance(last, UnreadableRecord) and last.rule == "truncated_archive"
    assert "000000002" in last.reason


@pytest.mark.parametrize(
    ("content", "rule"),
    [(b"", "empty_file"), (b"this is not a tar archive at all " * 40, "corrupt_tar")],
)
def test_a_file_that_is_no_tar_is_one_unreadable_item(content: bytes, rule: str) -> None:
    items = list(read_webdataset(io.BytesIO(content), MAX))
    assert len(items) == 1 and isinstance(items[0], UnreadableRecord)
    assert items[0].rule == rule


def test_an_oversized_member_is_quarantined_not_read(tmp_path: Path) -> None:
    samples = photo_samples(("astronaut",))
    with (write_webdataset(tmp_path / "x.tar", samples)).open("rb") as f:
        items = list(read_webdataset(f, max_sample_bytes=1000))
    assert isinstance(items[0], UnreadableRecord) and items[0].rule == "sample_too_large"


def test_img2dataset_parquet_reads_as_pairs_and_failed_downloads_as_unreadable(
    tmp_path: Path,
) -> None:
    samples = [*photo_samples(("astronaut", "coffee")), Sample("000000009", None)]
    path = write_parquet(tmp_path / "00000.parquet", samples)
    items = list(read_image_parquet(path, MAX))
    assert [type(i).__name__ for i in items] == ["PairRecord", "PairRecord", "UnreadableRecord"]
    pair = items[1]
    assert isinstance(pair, PairRecord)
    assert pair.row == 1 and pair.key == samples[1].key and pair.image == samples[1].image
    assert pair.image_name == "jpg" and pair.caption == samples[1].caption
    assert json.loads(pair.metadata_json or "{}")["status"] == "success"
    failed = items[2]
    assert isinstance(failed, UnreadableRecord) and failed.rule == "failed_download"
    assert "HTTP 404" in failed.reason and "row 2" in failed.reason


def test_a_damaged_parquet_file_is_one_unreadable_item(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "x.parquet", photo_samples(("moon",)))
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(path.read_bytes()[:-20])
    items = list(read_image_parquet(damaged, MAX))
    assert len(items) == 1 and isinstance(items[0], UnreadableRecord)
    assert items[0].rule == "corrupt_parquet"


def test_the_format_is_detected_from_content(tmp_path: Path) -> None:
    samples = photo_samples(("moon",))
    assert image_text_format(write_webdataset(tmp_path / "a.tar", samples)) == WEBDATASET
    assert image_text_format(write_parquet(tmp_path / "b.parquet", samples)) == PARQUET
    renamed = tmp_path / "tar_named.jsonl"
    renamed.write_bytes((tmp_path / "a.tar").read_bytes())
    assert image_text_format(renamed) == WEBDATASET
    text = tmp_path / "c.jsonl"
    text.write_text('{"text": "hello"}\n')
    assert image_text_format(text) is None
    # A tar of text files only is no image-text data.
    with tarfile.open(tmp_path / "texts.tar", "w") as archive:
        info = tarfile.TarInfo("doc.txt")
        info.size = 5
        archive.addfile(info, io.BytesIO(b"hello"))
    assert image_text_format(tmp_path / "texts.tar") is None
