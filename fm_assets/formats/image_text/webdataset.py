"""A WebDataset tar shard (as img2dataset writes them) -> image-text pairs.

A sample is the run of consecutive members sharing a key: the member path up to the first dot
of its file name (`00000/000001.jpg`, `00000/000001.txt`, `00000/000001.json` are sample
`00000/000001`). Its image is the member whose extension is an image type, its caption the
`.txt` member (else the `caption` field of the `.json` member), its metadata the `.json`.

Bad input never raises: a damaged or truncated tar keeps every sample read before the damage and
ends with one unreadable item saying where it stopped; a sample without an image or a caption is
an unreadable item naming the sample and what it lacks.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from fm_assets.formats.image_text.records import (
    CAPTION_EXTENSIONS,
    IMAGE_EXTENSIONS,
    METADATA_EXTENSION,
    PairItem,
    PairNumbering,
    PairRule,
)
from fm_assets.formats.records import Rule


def sample_key(member_name: str) -> tuple[str, str]:
    """(key, extension) of a member: WebDataset splits at the first dot of the file name."""
    directory, _, base = member_name.rpartition("/")
    stem, dot, extension = base.partition(".")
    key = f"{directory}/{stem}" if directory else stem
    return key, extension.lower() if dot else ""


@dataclass
class _Sample:
    key: str
    members: dict[str, bytes] = field(default_factory=dict)  # extension -> bytes
    names: dict[str, str] = field(default_factory=dict)  # extension -> member name
    offsets: dict[str, int] = field(default_factory=dict)  # extension -> header offset
    oversized: list[str] = field(default_factory=list)  # members over the size bound


def read_webdataset(stream: BinaryIO, max_sample_bytes: int) -> Iterator[PairItem]:
    """Yield the pairs of a WebDataset tar (plain or gzip), in member order."""
    numbering = PairNumbering()
    current: _Sample | None = None
    try:
        # The caller owns `stream`: closing the TarFile would not close it either.
        archive = tarfile.open(fileobj=stream, mode="r|*")  # noqa: SIM115
    except tarfile.ReadError as exc:
        rule = Rule.EMPTY_FILE if "empty" in str(exc) else PairRule.CORRUPT_TAR
        yield numbering.unreadable(rule, f"not a readable tar archive: {exc}")
        return
    damage: str | None = None
    try:
        for member in archive:
            if not member.isfile():
                continue
            key, extension = sample_key(member.name)
            if current is not None and key != current.key:
                yield _pair(current, numbering)
                current = None
            if current is None:
                current = _Sample(key)
            current.names[extension] = member.name
            current.offsets[extension] = member.offset
            if member.size > max_sample_bytes:
                current.oversized.append(f"{member.name} ({member.size:,} bytes)")
                continue
            handle = archive.extractfile(member)
            current.members[extension] = handle.read() if handle is not None else b""
    except (tarfile.TarError, EOFError, OSError) as exc:
        damage = str(exc) or type(exc).__name__
    if current is not None:
        if damage is None:
            yield _pair(current, numbering)
        else:
            yield numbering.unreadable(
                Rule.TRUNCATED_ARCHIVE,
                f"sample {current.key} is cut short: the tar ends inside it ({damage})",
            )
            damage = None
    if damage is not None:
        yield numbering.unreadable(
            Rule.TRUNCATED_ARCHIVE,
            f"the tar is damaged after its last readable sample ({damage}); "
            "the samples before are kept",
        )
    if numbering.count == 0:
        yield numbering.unreadable(Rule.NO_DOCUMENTS, "the tar holds no samples")


def _pair(sample: _Sample, numbering: PairNumbering) -> PairItem:
    images = [e for e in sample.names if e in IMAGE_EXTENSIONS]
    if sample.oversized:
        return numbering.unreadable(
            PairRule.SAMPLE_TOO_LARGE,
            f"sample {sample.key}: {', '.join(sample.oversized)} over the per-sample bound "
            "(FM_MAX_DOCUMENT_BYTES)",
        )
    if not images:
        return numbering.unreadable(
            PairRule.MISSING_IMAGE,
            f"sample {sample.key} has no image member (it has: "
            f"{', '.join(sorted(sample.names.values()))})",
        )
    extension = images[0]
    image = sample.members[extension]
    metadata_bytes = sample.members.get(METADATA_EXTENSION)
    metadata: dict[str, object] = {}
    if metadata_bytes is not None:
        try:
            loaded = json.loads(metadata_bytes)
        except ValueError as exc:
            return numbering.unreadable(
                Rule.INVALID_JSON,
                f"sample {sample.key}: {sample.names[METADATA_EXTENSION]} is not JSON: {exc}",
                hashlib.sha256(image).hexdigest(),
            )
        metadata = loaded if isinstance(loaded, dict) else {"value": loaded}
    caption_extension = next((e for e in CAPTION_EXTENSIONS if e in sample.members), None)
    if caption_extension is not None:
        try:
            caption = sample.members[caption_extension].decode("utf-8")
        except UnicodeDecodeError as exc:
            return numbering.unreadable(
                Rule.INVALID_UTF8,
                f"sample {sample.key}: {sample.names[caption_extension]} is not UTF-8: {exc}",
                hashlib.sha256(image).hexdigest(),
            )
    elif isinstance(metadata.get("caption"), str):
        caption = str(metadata["caption"])
    else:
        return numbering.unreadable(
            PairRule.MISSING_CAPTION,
            f"sample {sample.key} has an image but no caption (.txt member or JSON `caption`)",
            hashlib.sha256(image).hexdigest(),
        )
    url = metadata.get("url")
    return numbering.pair(
        key=sample.key,
        image=image,
        image_name=sample.names[extension],
        image_extension=extension,
        caption=caption,
        metadata_json=None if metadata_bytes is None else json.dumps(metadata, sort_keys=True),
        url=url if isinstance(url, str) else None,
        offset=sample.offsets[extension],
    )
