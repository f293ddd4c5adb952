"""A `.html`/`.htm` or `.txt` file -> one document of the whole file's bytes."""

from __future__ import annotations

from collections.abc import Iterator

from fm_assets.formats.records import FileItem, RecordNumbering, Rule
from fm_assets.formats.sniff import charset_from_bom, charset_from_meta
from fm_assets.formats.streams import ContentStream


def read_whole_file(
    content: ContentStream, content_type: str, numbering: RecordNumbering, max_record_bytes: int
) -> Iterator[FileItem]:
    """Yield the whole file as one `content_type` ("html" or "text") document.

    Not decoded: a text file in a legacy encoding is still a document (extraction decodes it).
    The charset is the one a byte-order mark or, for HTML, a `<meta>` tag declares.
    """
    data = content.read_limited(max_record_bytes)
    if data is None:
        reason = f"the file is over the {max_record_bytes}-byte record limit"
        yield numbering.unreadable(Rule.RECORD_TOO_LARGE, reason)
        return
    if content.damage is not None:
        rule = Rule.TRUNCATED_FILE if content.damage.truncated else Rule.CORRUPT_GZIP
        reason = f"only {len(data)} bytes could be read: {content.damage.detail}"
        yield numbering.unreadable(rule, reason)
        return
    charset = charset_from_bom(data)
    if charset is None and content_type == "html":
        charset = charset_from_meta(data)
    yield numbering.parsed(content=data, content_type=content_type, charset=charset, offset=0)
