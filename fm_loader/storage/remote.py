"""Reaching files by URI: a local path, `file://`, or `s3://` on AWS or an S3-compatible store.

S3 credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_REGION, a profile, or an instance role); only the endpoint of an S3-compatible store is a
setting (`FM_S3_ENDPOINT`). The platform's object store is built on these same functions.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs


def _endpoint_parts(s3_endpoint: str) -> tuple[str, str]:
    """(scheme, host:port) of an endpoint; a bare `host:port` means http, as S3-compatible
    stores on a private network usually speak it."""
    scheme, separator, host = s3_endpoint.partition("://")
    if not separator:
        scheme, host = "http", s3_endpoint
    host = host.rstrip("/")
    if scheme not in ("http", "https") or not host or "/" in host:
        raise ValueError(
            f"FM_S3_ENDPOINT {s3_endpoint!r} is not an endpoint; "
            "set it to http://HOST:PORT or https://HOST:PORT (no bucket or path)"
        )
    return scheme, host


def s3_filesystem(s3_endpoint: str | None) -> pafs.S3FileSystem:
    """An S3 client for AWS (`s3_endpoint` None) or an S3-compatible store at `s3_endpoint`
    (`http://host:port`, `https://host:port` or a bare `host:port`)."""
    if not s3_endpoint:
        return pafs.S3FileSystem()
    scheme, host = _endpoint_parts(s3_endpoint)
    return pafs.S3FileSystem(endpoint_override=host, scheme=scheme)


def iceberg_s3_properties(s3_endpoint: str | None) -> dict[str, str]:
    """pyiceberg FileIO properties reaching an S3-compatible store at `s3_endpoint` ({} for AWS).

    Credentials are left to the AWS chain, as for every other client here. The region is pinned:
    without one pyiceberg asks AWS where the bucket lives, which is meaningless for a store of
    our own (and costs seconds of timeouts offline); we pin the region the AWS chain gives.
    """
    if not s3_endpoint:
        return {}
    scheme, host = _endpoint_parts(s3_endpoint)
    return {"s3.endpoint": f"{scheme}://{host}", "s3.region": s3_filesystem(s3_endpoint).region}


def filesystem_for(uri: str, s3_endpoint: str | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding `uri` and the path inside it.

    `uri` is an `s3://bucket/key` URI (reached at `s3_endpoint` when given: pyarrow's own
    `FileSystem.from_uri` knows nothing of it), a `file://` URI or a local path.
    """
    if uri.startswith("s3://"):
        return s3_filesystem(s3_endpoint), uri.removeprefix("s3://")
    if uri.startswith("file://"):
        # Taken literally, as Iceberg writes and reads them: a partition value is %-encoded in
        # the file's name on disk ("shard_set_key=web%40v1%2F..."); decoding it, as
        # `FileSystem.from_uri` does, names another file.
        return pafs.LocalFileSystem(), uri.removeprefix("file://")
    if "://" not in uri:
        return pafs.LocalFileSystem(), str(Path(uri).absolute())
    filesystem, path = pafs.FileSystem.from_uri(uri)
    return filesystem, path
