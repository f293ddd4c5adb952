"""A thin layer over pyarrow filesystems so the same code writes to a local directory or `s3://`."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from fm_assets.settings import Settings


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

    def exists(self, key: str) -> bool:
        return self.fs.get_file_info(self.path(key)).type != pafs.FileType.NotFound

    def read_bytes(self, key: str) -> bytes:
        with self.fs.open_input_stream(self.path(key), compression=None) as f:
            return f.read()

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
            with self.fs.open_output_stream(self.path(key)) as f:
                f.write(data)

    def list_dir(self, key: str) -> list[str]:
        """Names directly below `key` (files and directories); empty when it does not exist."""
        selector = pafs.FileSelector(self.path(key), allow_not_found=True, recursive=False)
        return sorted(info.base_name for info in self.fs.get_file_info(selector))

    def makedirs(self, key: str) -> None:
        self.fs.create_dir(self.path(key), recursive=True)

    def delete_dir(self, key: str) -> None:
        if self.exists(key):
            self.fs.delete_dir(self.path(key))


def open_object_store(settings: Settings) -> ObjectStore:
    """Open the configured object store: a local directory, `file://` or `s3://` URI."""
    location = settings.object_store
    if location.startswith("s3://"):
        kwargs: dict[str, object] = {}
        if settings.s3_endpoint:
            scheme, _, host = settings.s3_endpoint.partition("://")
            kwargs = {"endpoint_override": host or scheme, "scheme": scheme if host else "http"}
        fs = pafs.S3FileSystem(**kwargs)
        root = location.removeprefix("s3://")
        return ObjectStore(fs=fs, root=root, uri_prefix=location)
    if location.startswith("file://"):
        location = location.removeprefix("file://")
    Path(location).mkdir(parents=True, exist_ok=True)
    return ObjectStore(fs=pafs.LocalFileSystem(), root=location, uri_prefix=Path(location).as_uri())
