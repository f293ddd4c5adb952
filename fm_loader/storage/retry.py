"""Retrying what can pass: transient object-store and catalog failures, with backoff and jitter.

Shared by the loader (shard-set downloads) and the platform (landed files, Iceberg files, the
catalog); it lives in `fm_loader` because the loader must not depend on the platform.

A failure of the environment (a reset connection, a timeout, a 5xx or throttling answer, an
object the catalog says exists but a read could not find yet) is retried; when it persists the
operation raises `StorageUnavailable`, which fails the stage. Nothing here ever turns such a
failure into a quarantine row: only bytes that were read and are bad are quarantined, by the
readers. Everything else (a bad gzip member, a schema error, a missing object nobody promised)
is permanent and raised at once.
"""

from __future__ import annotations

import errno
import logging
import random
import re
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger("fm.progress")
_retries = 0  # transient failures retried by this process, for the loader's metrics


def retries_so_far() -> int:
    """How many transient failures this process has retried (they cost time, not data)."""
    return _retries


DEFAULT_ATTEMPTS = 6
_BASE_DELAY_S = 0.2
_MAX_DELAY_S = 5.0

_TRANSIENT_ERRNOS = {
    errno.ECONNRESET,
    errno.ECONNREFUSED,
    errno.ECONNABORTED,
    errno.ETIMEDOUT,
    errno.EPIPE,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ENETDOWN,
    errno.EAGAIN,
}
# How pyarrow's S3 client (AWS SDK), botocore and libpq spell failures that can pass. The AWS
# SDK names a GetObject failure by its error type only ("AWS Error SERVICE_UNAVAILABLE during
# GetObject operation: "), often with an empty message: a 500, a 503 and a SlowDown answer read
# that way, so the types are matched, not only the S3 codes and HTTP statuses.
_TRANSIENT_TEXT = re.compile(
    r"AWS Error (?:INTERNAL_FAILURE|SERVICE_UNAVAILABLE|SLOW_DOWN|THROTTLING|REQUEST_TIMEOUT)\b"
    r"|NETWORK_CONNECTION|curlCode|Connection reset|connection reset|Connection refused"
    r"|Broken pipe|timed out|Timeout|RequestTimeout|SlowDown|Throttl|TooManyRequests"
    r"|ServiceUnavailable|InternalError|HTTP response code: 5\d\d|HTTP status 5\d\d"
    r"|server closed the connection|could not connect to server|connection to server"
    r"|Unable to connect|Empty reply|Recv failure|Send failure|unexpected EOF",
)


class StorageUnavailable(RuntimeError):
    """A storage operation kept failing for a reason that can pass; the stage fails, loses
    nothing, and a rerun picks it up."""


def is_transient(exc: BaseException) -> bool:
    """True for failures of the environment that a later attempt may not meet."""
    if isinstance(exc, StorageUnavailable):
        return False  # already retried below us
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    if _is_sql_disconnect(exc):
        return True
    if isinstance(exc, (OSError, RuntimeError)) and not isinstance(exc, FileNotFoundError):
        return bool(_TRANSIENT_TEXT.search(str(exc)))
    return False


def _is_sql_disconnect(exc: BaseException) -> bool:
    try:
        from sqlalchemy.exc import DBAPIError
    except ImportError:  # pragma: no cover - sqlalchemy ships with pyiceberg's SQL catalog
        return False
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated) or bool(_TRANSIENT_TEXT.search(str(exc)))
    return False


# A 404: HeadObject's is a FileNotFoundError, GetObject's a plain OSError naming the SDK's type
# (NO_SUCH_KEY when the answer's XML was read, RESOURCE_NOT_FOUND when it was not).
_MISSING_TEXT = re.compile(r"NoSuchKey|NO_SUCH_KEY|RESOURCE_NOT_FOUND|Path does not exist")


def _is_missing(exc: BaseException) -> bool:
    if isinstance(exc, FileNotFoundError):
        return True
    return isinstance(exc, OSError) and bool(_MISSING_TEXT.search(str(exc)))


def with_retries(
    operation: Callable[[], T],
    *,
    what: str,
    must_exist: bool = False,
    attempts: int = DEFAULT_ATTEMPTS,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """`operation()`, retried with exponential backoff and jitter while it fails transiently.

    `what` names the operation in the error (e.g. "reading s3://landing/b-1/a.warc.gz").
    `must_exist`: the object was promised (by a landing manifest or a catalog snapshot), so "not
    found" is an eventually consistent read or a lagging replica, retried like a reset; when it
    persists, the error says the promise is broken.
    """
    global _retries
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except Exception as exc:
            missing = must_exist and _is_missing(exc)
            if not (missing or is_transient(exc)):
                raise
            if attempt == attempts:
                cause = f"{type(exc).__name__}: {exc}"
                hint = (
                    "it is listed as present but cannot be found; check the object store "
                    "(was it deleted?) and rerun"
                    if missing
                    else "the store or catalog is unreachable or overloaded; check it and rerun "
                    "(nothing was quarantined, a rerun continues where this stopped)"
                )
                raise StorageUnavailable(
                    f"{what} failed {attempts} times ({cause}): {hint}"
                ) from exc
            _retries += 1
            delay = min(_MAX_DELAY_S, _BASE_DELAY_S * 2 ** (attempt - 1))
            delay *= 0.5 + random.random()  # jitter: retrying workers do not stampede together
            log.debug("%s failed transiently (%s); retry %d in %.1f s", what, exc, attempt, delay)
            (sleep or time.sleep)(delay)
    raise AssertionError("unreachable")  # pragma: no cover
