"""Turn raw bytes into text: the declared charset, then UTF-8, then a detector; or a reason."""

from __future__ import annotations

import codecs
import contextlib
import re

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


# Control characters other than whitespace, U+FFFD, surrogates and private-use code points:
# unicodedata categories Cc/Cs/Co minus \t\n\r\f, plus U+FFFD; one regex scan instead of
# a category lookup per character.
_JUNK = re.compile(
    "[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ufffd\ud800-\udfff\ue000-\uf8ff"
    "\U000f0000-\U000ffffd\U00100000-\U0010fffd]"
)


def junk_fraction(text: str, sample: int = 100_000) -> float:
    """Share of control (other than whitespace) and replacement characters in a prefix."""
    head = text[:sample]
    if not head:
        return 0.0
    return len(_JUNK.findall(head)) / len(head)
