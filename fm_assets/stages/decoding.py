"""Turn raw bytes into text: the declared charset, then UTF-8, then a detector; or a reason."""

from __future__ import annotations

import codecs
import contextlib
import unicodedata

# Share of characters that may be control or replacement characters before text counts as junk.
MAX_JUNK_FRACTION = 0.05


def decode_bytes(content: bytes, declared: str | None) -> tuple[str | None, str]:
    """Return (text, how) or (None, reason) when the bytes are not text in any known encoding."""
    candidates: list[str] = []
    if declared:
        with contextlib.suppress(LookupError):  # an unknown declared charset is just a hint
            candidates.append(codecs.lookup(declared).name)
    candidates.append("utf-8")
    for encoding in candidates:
        try:
            return content.decode(encoding), encoding
        except UnicodeDecodeError:
            continue
    from charset_normalizer import from_bytes

    best = from_bytes(content[: 1 << 20]).best()
    if best is None or best.encoding is None:
        return None, "bytes are not text in the declared charset, UTF-8 or any detected encoding"
    return content.decode(best.encoding, errors="replace"), best.encoding


def junk_fraction(text: str, sample: int = 100_000) -> float:
    """Share of control (other than whitespace) and replacement characters in a prefix."""
    head = text[:sample]
    if not head:
        return 0.0
    junk = sum(
        1
        for ch in head
        if ch == "\ufffd"
        or (unicodedata.category(ch) in ("Cc", "Cs", "Co") and ch not in "\t\n\r\f")
    )
    return junk / len(head)
