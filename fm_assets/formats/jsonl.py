"""JSON Lines -> one document per non-blank line, read one line at a time."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from fm_assets.formats.records import FileItem, ReadStats, RecordNumbering, Rule
from fm_assets.formats.streams import ContentStream, StreamDamage

_UTF8_BOM: Final = b"\xef\xbb\xbf"
_SKIP_CHUNK: Final = 1 << 20
_JSON_TYPE_NAMES: Final = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


@dataclass(frozen=True)
class _Line:
    """One physical line of the file."""

    number: int  # 1-based
    offset: int  # byte offset of its first byte in the (decompressed) file
    raw: bytes | None  # with its line terminator; None when longer than the size limit
    size: int
    terminated: bool  # False for a last line without a newline (or one cut by damage)

    @property
    def where(self) -> str:
        return f"line {self.number} (byte {self.offset})"

    def sha256(self) -> str | None:
        """sha256 hex of the line without its terminator; None when it was too large to keep."""
        if self.raw is None:
            return None
        end = len(self.raw)
        for terminator in (b"\n", b"\r"):
            if self.raw.endswith(terminator, 0, end):  # bounds, not a slice: no copy
                end -= 1
        return hashlib.sha256(memoryview(self.raw)[:end]).hexdigest()


def read_jsonl(
    content: ContentStream, numbering: RecordNumbering, stats: ReadStats, max_record_bytes: int
) -> Iterator[FileItem]:
    """Yield one item per non-blank line; blank lines are skipped silently (`stats.lines`
    counts every line read).

    A line must be UTF-8 and a JSON object with a string `text` (a text document) or, failing
    that, `html` field (an HTML document); `id`, `url` and `lang` are optional.
    """
    last: _Line | None = None
    for line in _lines(content, max_record_bytes):
        last = line
        stats.lines = line.number
        if not line.terminated and content.damage is not None:
            break  # the cut-off start of a line: reported with the damage below
        item = _parse_line(line, numbering, max_record_bytes, content.origin(line.offset))
        if item is not None:
            yield item
    if content.damage is not None:
        yield _damage_item(content.damage, last, numbering)


def _damage_item(damage: StreamDamage, last: _Line | None, numbering: RecordNumbering) -> FileItem:
    """The one item saying where a damaged gzip stream stopped the reading."""
    rule = Rule.TRUNCATED_FILE if damage.truncated else Rule.CORRUPT_GZIP
    detail = damage.detail
    if last is None:
        return numbering.unreadable(rule, f"no complete line could be read: {detail}")
    if last.terminated or last.raw is None:
        return numbering.unreadable(rule, f"reading stopped after {last.where}: {detail}")
    reason = f"{last.where} is cut off after {last.size} bytes: {detail}"
    return numbering.unreadable(rule, reason, last.sha256())


def _lines(content: ContentStream, max_record_bytes: int) -> Iterator[_Line]:
    """Split the content into lines without holding more than one line in memory."""
    number = 0
    offset = 0
    while chunk := content.readline(max_record_bytes + 1):
        number += 1
        terminated = chunk.endswith(b"\n")
        if len(chunk) <= max_record_bytes or terminated:
            yield _Line(number, offset, chunk, len(chunk), terminated)
            offset += len(chunk)
            continue
        size = len(chunk)
        while not terminated and (chunk := content.readline(_SKIP_CHUNK)):
            size += len(chunk)
            terminated = chunk.endswith(b"\n")
        yield _Line(number, offset, None, size, terminated)
        offset += size


def _parse_line(
    line: _Line, numbering: RecordNumbering, max_bytes: int, origin: int
) -> FileItem | None:
    """Turn one line into an item (`origin`: where it starts in the bytes read); None for a
    blank line."""
    if line.raw is None:
        reason = f"{line.where}: {line.size} bytes, over the {max_bytes}-byte record limit"
        return numbering.unreadable(Rule.RECORD_TOO_LARGE, reason)
    if line.raw.isspace():
        return None
    value = _json_object(line, line.raw)
    if isinstance(value, tuple):
        return numbering.unreadable(*value, raw_sha256=line.sha256())
    return _document(value, line, numbering, origin)


def _json_object(line: _Line, raw: bytes) -> dict[str, Any] | tuple[str, str]:
    """The line's JSON object, or (rule, reason) when it is not one.

    A function of its own so the decoded text (as large as the line) is freed on return.
    """
    if line.number == 1:
        raw = raw.removeprefix(_UTF8_BOM)  # json.loads rejects a BOM
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_byte = raw[exc.start]
        return Rule.INVALID_UTF8, (
            f"{line.where}: not valid UTF-8 (byte 0x{bad_byte:02x} at column {exc.start})"
        )
    try:
        value = json.loads(text)  # the line terminator is JSON whitespace
    # ValueError covers JSONDecodeError and integers over Python's digit limit.
    except (ValueError, RecursionError) as exc:
        return Rule.INVALID_JSON, f"{line.where}: not valid JSON: {exc}"
    if not isinstance(value, dict):
        return Rule.INVALID_JSON, f"{line.where}: expected a JSON object, got {_json_type(value)}"
    return value


def _document(
    value: dict[str, Any], line: _Line, numbering: RecordNumbering, origin: int
) -> FileItem:
    """Build the item for a JSON object: its `text` (preferred) or `html` field, with metadata."""
    field = next((name for name in ("text", "html") if isinstance(value.get(name), str)), None)
    if field is None:
        reason = f"{line.where}: no string `text` or `html` field ({_describe_fields(value)})"
        return numbering.unreadable(Rule.MISSING_TEXT_FIELD, reason, line.sha256())
    try:
        content = value[field].encode("utf-8")
    except UnicodeEncodeError as exc:  # JSON can escape a lone surrogate: "\ud800"
        reason = f"{line.where}: `{field}` holds a lone surrogate at character {exc.start}"
        return numbering.unreadable(Rule.INVALID_UTF8, reason, line.sha256())
    # Validated by the raw stage (`storage.generators`), which quarantines a malformed one.
    generator = value.get("generator")
    return numbering.parsed(
        content=content,
        content_type=field,
        url=_string_or_none(value.get("url")),
        # Re-encoded above, so UTF-8 is the true charset even if the HTML's <meta> says otherwise.
        charset="utf-8",
        lang_hint=_string_or_none(value.get("lang")),
        external_id=_external_id(value.get("id")),
        offset=origin,
        line=line.number,
        generator=None if generator is None else json.dumps(generator, sort_keys=True),
    )


def _describe_fields(value: dict[str, Any]) -> str:
    """Say what the object holds instead of a string text/html, for a reason message."""
    wrong = [f"`{name}` is {_json_type(value[name])}" for name in ("text", "html") if name in value]
    if wrong:
        return ", ".join(wrong)
    keys = ", ".join(list(value)[:10])
    return f"keys: {keys}" if keys else "empty object"


def _json_type(value: object) -> str:
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _string_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _external_id(value: object) -> str | None:
    """The `id` field as a string: strings and numbers as written, anything else as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
