"""The object store: one root on a local directory or `s3://`, with atomic writes.

URIs are reached through `fm_loader.remote` (the loader reads shard sets the same way); S3
credentials come from the standard AWS chain, the endpoint of an S3-compatible store from
`FM_S3_ENDPOINT`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from fm_assets.settings import Settings
from fm_loader.remote import filesystem_for, iceberg_s3_properties, s3_filesystem
from fm_loader.retry import with_retries

__all__ = [
    "ObjectStore",
    "filesystem_for",
    "iceberg_s3_properties",
    "open_object_store",
    "read_verified",
    "s3_filesystem",
]

_CHUNK = 8 << 20


@dataclass(frozen=True)
class ObjectStore:
    """A filesystem plus a root path inside it; keys are '/'-separated paths below the root."""

    fs: pafs.FileSystem
    root: str
    uri_prefix: str  # how a key is spelled as a URI, for catalogs and the loader

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, key: str) -> str:
        return f"{self.root.rstrip('/')}/{key.lstrip('/')}"

    def uri(self, key: str) -> str:
        return f"{self.uri_prefix.rstrip('/')}/{key.lstrip('/')}"

    def key_of(self, uri: str) -> str:
        """The key of a URI inside this store (the inverse of `uri`)."""
        prefix = self.uri_prefix.rstrip("/") + "/"
        if not uri.startswith(prefix):
            raise ValueError(f"{uri} is not inside the object store {self.uri_prefix}")
        return uri.removeprefix(prefix)

    def exists(self, key: str) -> bool:
        info = with_retries(lambda: self.fs.get_file_info(self.path(key)), what=f"looking up {key}")
        return info.type != pafs.FileType.NotFound

    def read_bytes(self, key: str) -> bytes:
        def read() -> bytes:
            with self.fs.open_input_stream(self.path(key), compression=None) as f:
                data: bytes = f.read()
            return data

        return with_retries(read, what=f"reading {self.uri(key)}")

    def open_input(self, key: str) -> pafs.NativeFile:
        return self.fs.open_input_file(self.path(key))

    def write_bytes_atomic(self, key: str, data: bytes) -> None:
        """Write `data` so readers see the old object or the whole new one, never a prefix."""
        if self.is_local:
            # Rename within one directory is atomic on POSIX; S3 PUTs are atomic by themselves.
            final = self.path(key)
            Path(final).parent.mkdir(parents=True, exist_ok=True)
            tmp = f"{final}.tmp-{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        else:
            with self.fs.open_output_stream(self.path(key), compression=None) as f:
                f.write(data)

    def upload_file(self, local_path: Path, key: str) -> None:
        """Copy a local file to `key` so that it appears whole: on S3 when the upload completes,
        locally by renaming a finished copy into place."""
        if self.is_local:
            final = Path(self.path(key))
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = final.with_name(f"{final.name}.tmp-{uuid.uuid4().hex}")
            try:
                shutil.copyfile(local_path, tmp)
                os.replace(tmp, final)
            finally:
                tmp.unlink(missing_ok=True)
            return
        with (
            open(local_path, "rb") as src,
            # compression=None: pyarrow would otherwise compress by the key's extension.
            self.fs.open_output_stream(self.path(key), compression=None) as dst,
        ):
            while chunk := src.read(_CHUNK):
                dst.write(chunk)

    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None when it does not exist."""
        info = self.fs.get_file_info(self.path(key))
        return info.size if info.type == pafs.FileType.File else None

    def delete_file(self, key: str) -> None:
        if self.exists(key):
            self.fs.delete_file(self.path(key))

    def list_dir(self, key: str) -> list[str]:
        """Names directly below `key` (files and directories); empty when it does not exist."""
        selector = pafs.FileSelector(self.path(key), allow_not_found=True, recursive=False)
        return sorted(info.base_name for info in self.fs.get_file_info(selector))

    def makedirs(self, key: str) -> None:
        # S3 has no directories, and pyarrow's create_dir asks for the bucket itself (HeadBucket),
        # which an identity confined to its prefixes may not do (deploy/iam/).
        if self.is_local:
            self.fs.create_dir(self.path(key), recursive=True)

    def delete_dir(self, key: str) -> None:
        if self.exists(key):
            self.fs.delete_dir(self.path(key))


def read_verified(uri: str, expected_sha256: str, s3_endpoint: str | None, fix: str) -> bytes:
    """The bytes of a registry copy at `uri`, refused unless they hash to `expected_sha256`.

    `fix` says what to do when the copy was modified (e.g. the command that registers it again).
    """
    fs, path = filesystem_for(uri, s3_endpoint)
    with fs.open_input_stream(path, compression=None) as f:
        data: bytes = f.read()
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256:
        raise ValueError(
            f"{uri} has sha256 {actual}, registered as {expected_sha256}: the registry copy was "
            f"modified; {fix}"
        )
    return data


def open_object_store(settings: Settings) -> ObjectStore:
    """Open the configured object store: a local directory, `file://` or `s3://` URI."""
    location = settings.object_store
    if location.startswith("s3://"):
        root = location.removeprefix("s3://").rstrip("/")
        if not root:
            raise ValueError(
                f"FM_OBJECT_STORE {location!r} names no bucket; set it to s3://BUCKET[/PREFIX]"
            )
        return ObjectStore(
            fs=s3_filesystem(settings.s3_endpoint), root=root, uri_prefix=f"s3://{root}"
        )
    if location.startswith("file://"):
        location = location.removeprefix("file://")
    Path(location).mkdir(parents=True, exist_ok=True)
    return ObjectStore(fs=pafs.LocalFileSystem(), root=location, uri_prefix=Path(location).as_uri())
