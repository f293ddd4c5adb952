"""Tokenizers registered by the sha256 of their tokenizer.json, copied into the object store."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.objectstore import open_object_store

_DEFAULT_KEY = "registry/tokenizers/DEFAULT"


@dataclass(frozen=True)
class TokenizerInfo:
    tokenizer_hash: str
    name: str
    vocab_size: int
    uri: str


def tokenizer_hash_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def register_tokenizer(
    settings: Settings, path: Path, *, make_default: bool = False
) -> TokenizerInfo:
    """Copy a tokenizer.json into the registry (once per content hash) and return its entry."""
    from tokenizers import Tokenizer

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"tokenizer file {path} does not exist; pass a HF tokenizer.json")
    data = path.read_bytes()
    try:
        tokenizer = Tokenizer.from_str(data.decode())
    except Exception as exc:
        raise ValueError(f"{path} is not a HF tokenizers tokenizer.json: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    store = open_object_store(settings)
    key = f"registry/tokenizers/{digest}.json"
    if not store.exists(key):
        store.write_bytes_atomic(key, data)
    existing = find_tokenizer(settings, digest)
    info = existing or TokenizerInfo(
        tokenizer_hash=digest,
        name=path.stem,
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        uri=store.uri(key),
    )
    if existing is None:
        row = {**info.__dict__, "registered_at": dt.datetime.now(dt.UTC)}
        catalog.append_rows(settings, "tokenizers", pa.Table.from_pylist([row]))
    if make_default:
        store.write_bytes_atomic(_DEFAULT_KEY, json.dumps({"tokenizer_hash": digest}).encode())
    return info


def find_tokenizer(settings: Settings, tokenizer_hash: str) -> TokenizerInfo | None:
    rows = catalog.read_table(
        settings, "tokenizers", row_filter=catalog.where_equal("tokenizer_hash", tokenizer_hash)
    ).to_pylist()
    if not rows:
        return None
    row = rows[0]
    return TokenizerInfo(row["tokenizer_hash"], row["name"], row["vocab_size"], row["uri"])


def default_tokenizer(settings: Settings) -> TokenizerInfo:
    """The tokenizer the tokenize stage uses for new batches."""
    store = open_object_store(settings)
    if not store.exists(_DEFAULT_KEY):
        raise ValueError(
            "no default tokenizer is registered: run "
            "`fm tokenizer register PATH/TO/tokenizer.json --default` first"
        )
    digest = json.loads(store.read_bytes(_DEFAULT_KEY))["tokenizer_hash"]
    info = find_tokenizer(settings, digest)
    if info is None:
        raise ValueError(
            f"default tokenizer {digest} is missing from the registry; register it again"
        )
    return info


def resolve_tokenizer(settings: Settings, ref: str) -> TokenizerInfo:
    """A tokenizer by file path (registering it) or by registered hash (or unique hash prefix)."""
    if Path(ref).is_file():
        return register_tokenizer(settings, Path(ref))
    rows = catalog.read_table(settings, "tokenizers").to_pylist()
    matches = [r for r in rows if r["tokenizer_hash"].startswith(ref)]
    if len(matches) != 1:
        known = ", ".join(f"{r['name']}={r['tokenizer_hash'][:12]}" for r in rows) or "none"
        raise ValueError(
            f"tokenizer {ref!r} is neither a file nor one registered hash; known: {known}"
        )
    row = matches[0]
    return TokenizerInfo(row["tokenizer_hash"], row["name"], row["vocab_size"], row["uri"])
