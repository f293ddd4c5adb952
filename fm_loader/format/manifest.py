"""The shard-set manifest: the versioned contract between the shard writer and the loader.

A shard set is a directory holding MDS shards, MDS's `index.json` and our `fm_manifest.json`. The
writer writes the manifest last, so its presence means the shard set is complete. This module
imports only the standard library: the writer (fm_assets) and the loader both use it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from fm_loader.format.set_format import SetFormat

MANIFEST_FORMAT_VERSION = 1
MANIFEST_NAME = "fm_manifest.json"
INDEX_NAME = "index.json"  # written by mosaicml-streaming's MDSWriter
TOKEN_DTYPES = ("uint16", "uint32")
_T = TypeVar("_T")
_SHARD_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,200}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def mds_columns(seq_len: int, token_dtype: str) -> dict[str, str]:
    """The MDS column -> encoding mapping of a shard set: the on-disk contract.

    - `input_ids`: real tokens then padding, fixed length `seq_len`;
    - `doc_ids`: the segments' doc ids joined with "\\n", one per segment, in order;
    - `doc_spans`: flattened (start_in_sample, length, doc_offset) int32 triples, one per segment.
    """
    if token_dtype not in TOKEN_DTYPES:
        raise ValueError(f"token dtype must be one of {TOKEN_DTYPES}, got {token_dtype!r}")
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    return {
        "input_ids": f"ndarray:{token_dtype}:{seq_len}",
        "doc_ids": "str",
        "doc_spans": "ndarray:int32",
    }


def schema_fingerprint(seq_len: int, token_dtype: str) -> str:
    """sha256 over the canonical JSON of the column encodings and the manifest format version.

    Writer and loader both call this; a loader that computes a different value for the same
    (seq_len, dtype) reads a layout it does not understand and must refuse.
    """
    canonical = json.dumps(
        {"format_version": MANIFEST_FORMAT_VERSION, "columns": mds_columns(seq_len, token_dtype)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class ShardInfo:
    """One MDS shard file of a shard set."""

    name: str  # MDS raw_data basename, e.g. "shard.00000.mds"
    sha256: str  # of the shard file bytes
    bytes: int
    samples: int
    tokens: int  # real (non-padding) tokens in this shard


@dataclass(frozen=True)
class ShardSetManifest:
    """Everything a loader must check before serving a shard set, plus its shard checksums."""

    format_version: int
    shard_set_key: str
    source_version: str  # dataset version key, e.g. "web@v1"
    version_content_hash: str
    tokenizer_hash: str  # sha256 of the tokenizer.json bytes
    vocab_size: int
    token_dtype: str
    pad_token_id: int
    seq_len: int
    schema_fingerprint: str
    pipeline_version: str
    created_at: str  # ISO 8601, UTC
    num_samples: int
    num_tokens: int  # real tokens
    num_documents: int  # distinct doc ids
    packing_efficiency: float
    shards: tuple[ShardInfo, ...]

    @property
    def set_key(self) -> str:
        return self.shard_set_key

    @property
    def sample_kind(self) -> str:
        """What its samples are (`fm_loader.samples.kind`): packed token sequences, the one
        kind this format version holds (format 2, `format.pair_set`, holds image-text pairs)."""
        return "tokens"

    def layout_fingerprint(self) -> str:
        """The schema fingerprint this loader computes for the set's layout: its manifest must
        say the same (`sources.resolve.check_compatible`)."""
        return schema_fingerprint(self.seq_len, self.token_dtype)

    def columns(self) -> dict[str, str]:
        """The set's MDS columns and encodings."""
        return mds_columns(self.seq_len, self.token_dtype)

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, fixed separators) so equal manifests hash equally."""
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ShardSetManifest:
        """Parse and validate a manifest; unknown format versions and malformed fields raise."""
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:  # RecursionError: absurd nesting
            raise ValueError(f"manifest is not valid JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise ValueError("manifest must be a JSON object")
        version = obj.get("format_version")
        if version != MANIFEST_FORMAT_VERSION:
            raise ValueError(
                f"unsupported shard-set manifest format_version {version!r}; this loader reads "
                f"version {MANIFEST_FORMAT_VERSION} (packed tokens) and 2 (image-text pairs). "
                "Upgrade fm_loader or rebuild the shard set "
                "with this pipeline (`fm shards build DATASET@vN --tokenizer PATH --seq-len N`)"
            )
        shards = obj.get("shards")
        if not isinstance(shards, list):
            raise ValueError("manifest field 'shards' must be a list")
        fields_ = {**obj, "shards": tuple(build_dataclass(ShardInfo, s, "shard") for s in shards)}
        manifest = build_dataclass(cls, fields_, "manifest")
        manifest.check_consistency()
        return manifest

    def check_consistency(self) -> None:
        if self.token_dtype not in TOKEN_DTYPES:
            raise ValueError(f"manifest token_dtype {self.token_dtype!r} not in {TOKEN_DTYPES}")
        if self.seq_len <= 0 or self.num_samples < 0 or self.num_tokens < 0:
            raise ValueError(
                f"manifest seq_len {self.seq_len}, num_samples {self.num_samples} and num_tokens "
                f"{self.num_tokens} must be positive, non-negative and non-negative"
            )
        for shard in self.shards:
            # Shard names become paths in the set's directory and keys in the object store: a
            # bare file name only, never one that climbs out of the set.
            if not _SHARD_NAME.fullmatch(shard.name):
                raise ValueError(f"manifest shard name {shard.name!r:.80} is not a file name")
            if not _SHA256.fullmatch(shard.sha256):
                raise ValueError(f"manifest shard {shard.name} sha256 {shard.sha256!r:.80} is bad")
            if min(shard.bytes, shard.samples, shard.tokens) < 0:
                raise ValueError(f"manifest shard {shard.name} has a negative size or count")
        if sum(s.samples for s in self.shards) != self.num_samples:
            raise ValueError("manifest num_samples differs from the sum over its shards")
        if sum(s.tokens for s in self.shards) != self.num_tokens:
            raise ValueError("manifest num_tokens differs from the sum over its shards")


def build_dataclass(cls: type[_T], obj: Any, what: str) -> _T:
    """Instantiate a manifest dataclass from a dict, checking keys and primitive types."""
    if not isinstance(obj, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(obj).__name__}")
    expected = {f.name: f.type for f in fields(cls)}  # type: ignore[arg-type]
    missing = sorted(set(expected) - set(obj))
    unknown = sorted(set(obj) - set(expected))
    if missing or unknown:
        raise ValueError(f"{what} fields do not match format: missing {missing}, unknown {unknown}")
    values = dict(obj)
    for name, type_name in expected.items():
        value = values[name]
        # `from __future__ import annotations` leaves field types as strings.
        ok = {
            "int": isinstance(value, int) and not isinstance(value, bool),
            "str": isinstance(value, str),
            "float": isinstance(value, int | float) and not isinstance(value, bool),
        }.get(str(type_name), True)
        if not ok:
            raise ValueError(f"{what} field {name!r} must be {type_name}, got {value!r}")
        if type_name == "float":
            values[name] = float(value)
    return cls(**values)


def local_directory(dir_or_uri: str | Path) -> Path:
    """A shard-set location as a local path; remote URIs are not served by this first cut."""
    text = str(dir_or_uri)
    scheme = urlparse(text).scheme
    if scheme == "file":
        return Path(urlparse(text).path)
    if scheme and len(scheme) > 1:  # one letter: a Windows drive, not a scheme
        raise NotImplementedError(
            f"shard set {text} is remote ({scheme}://); this loader reads local shard sets only. "
            "Copy the directory locally and pass its path; remote download and caching come "
            "with the full loader contract"
        )
    return Path(text)


def manifest_path(dir_or_uri: str | Path) -> Path:
    return local_directory(dir_or_uri) / MANIFEST_NAME


def read_manifest_bytes(dir_or_uri: str | Path) -> bytes:
    """The raw manifest bytes (what the catalog's `manifest_sha256` pins)."""
    path = manifest_path(dir_or_uri)
    if not path.is_file():
        raise ValueError(
            f"{path.parent} is not a complete shard set: {MANIFEST_NAME} is missing (the writer "
            "writes it last). Rebuild it with `fm shards build DATASET@vN --tokenizer PATH "
            "--seq-len N`"
        )
    return path.read_bytes()


def read_manifest(dir_or_uri: str | Path) -> ShardSetManifest:
    """Read and validate the manifest of a shard-set directory (a path or file:// URI)."""
    return _parse(read_manifest_bytes(dir_or_uri))


def _parse(data: bytes) -> ShardSetManifest:
    return parse_manifest(data.decode("utf-8"))


def parse_manifest(text: str) -> ShardSetManifest:
    """A shard set's manifest: format 1 (packed tokens), or format 2 (image-text pairs,
    `fm_loader.format.pair_set.PairSetManifest`); anything else raises ValueError."""
    try:
        version = json.loads(text).get("format_version")
    except (json.JSONDecodeError, RecursionError, AttributeError):
        version = None  # from_json says what is wrong
    if version == 2:
        from fm_loader.format.pair_set import PairSetManifest  # imports this module

        return PairSetManifest.from_json(text)
    return ShardSetManifest.from_json(text)


SHARD_SETS: SetFormat[ShardSetManifest] = SetFormat(
    noun="shard set",
    manifest_name=MANIFEST_NAME,
    catalog_table="shard_sets",
    parse=_parse,
    how_to_build="build it with `fm shards build {version} --tokenizer PATH --seq-len N`",
)
