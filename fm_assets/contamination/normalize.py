"""Text normalisation, words and 64-bit word and n-gram hashes for contamination matching.

Documents and eval items are compared in this normalised form (folded, case-folded, numbers
masked); every normalised word maps back to a character span of the original text.
docs/contamination.md describes the rules.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

# Word hashes: polynomial over UTF-8 bytes with base _BYTE_BASE; n-gram hashes: polynomial over
# word hashes with base _WORD_BASE. Both odd, so they are invertible modulo 2**64. Changing any
# constant changes every hash: bump CONTAMINATION_RULES_VERSION (registry.py) if you do.
_BYTE_BASE = 0x100000001B3  # the 64-bit FNV prime
_WORD_BASE = 0x9E3779B97F4A7C15  # 2**64 / golden ratio, odd
_LENGTH_SALT = 0xD6E8FEB86659FD93
_MASK64 = (1 << 64) - 1
_SPACE = 0x20

_ZERO_RUN = re.compile(b"0{2,}")
_ZERO = 0x30


def _map_char(char: str, mask_numbers: bool) -> str:
    out: list[str] = []
    for part in unicodedata.normalize("NFKD", char):
        for folded in part.casefold():
            category = unicodedata.category(folded)
            if category in ("Mn", "Me"):  # accents and enclosing marks: folded away
                continue
            if category[0] == "N":
                digit = unicodedata.decimal(folded, None)
                out.append("0" if mask_numbers or digit is None else str(digit))
            elif category[0] == "L" or category == "Mc":
                out.append(folded)
            else:
                out.append(" ")
    return "".join(out)


_UNKNOWN = 0xFFFFFFFE  # code point not seen yet
_SEVERAL = 0xFFFFFFFF  # maps to no character or to several
_PLACEHOLDER = re.compile("\x01")  # never in mapped text: U+0001 maps to a space


class _CharMap(dict[int, str]):
    """The mapping of each code point, filled on first sight, plus two fast tables.

    `ascii_table` maps ASCII bytes; `single` maps each Basic Multilingual Plane code point that
    becomes exactly one character to that character, so mapping a whole text is a numpy gather.
    """

    def __init__(self, mask_numbers: bool) -> None:
        super().__init__()
        self.mask_numbers = mask_numbers
        self.single = np.full(0x10000, _UNKNOWN, dtype=np.uint32)
        for codepoint in range(128):
            self.learn(codepoint)
        self.ascii_table = bytes(ord(self[b]) if b < 128 else b for b in range(256))

    def __missing__(self, codepoint: int) -> str:
        mapped = _map_char(chr(codepoint), self.mask_numbers)
        self[codepoint] = mapped
        return mapped

    def learn(self, codepoint: int) -> None:
        mapped = self[codepoint]
        if codepoint < 0x10000:
            self.single[codepoint] = ord(mapped) if len(mapped) == 1 else _SEVERAL

    def map_text(self, text: str) -> tuple[str, npt.NDArray[np.int64] | None]:
        """`text` mapped, and how many characters each character became (None: one each)."""
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        in_plane = np.minimum(codes, 0xFFFF)
        out = self.single[in_plane]
        if np.any(out == _UNKNOWN):
            for codepoint in np.unique(codes[out == _UNKNOWN]).tolist():
                self.learn(codepoint)
            out = self.single[in_plane]
        out[codes > 0xFFFF] = _SEVERAL
        several = np.flatnonzero(out == _SEVERAL)
        if not len(several):
            return out.tobytes().decode("utf-32-le"), None
        pieces = [self[c] for c in codes[several].tolist()]
        out[several] = 1
        replacements = iter(pieces)
        mapped = _PLACEHOLDER.sub(lambda _: next(replacements), out.tobytes().decode("utf-32-le"))
        lengths = np.ones(len(codes), dtype=np.int64)
        lengths[several] = [len(p) for p in pieces]
        return mapped, lengths


_CHAR_MAPS = {True: _CharMap(mask_numbers=True), False: _CharMap(mask_numbers=False)}


def mapped_bytes(text: str, *, mask_numbers: bool = True) -> bytes:
    """UTF-8 of `text` with every code point mapped: letters folded, others a space, digits "0".

    The words are the runs of bytes other than the space. Each code point maps on its own, and
    never to a space inside a word, so the words do not depend on how the text is cut up. With
    `mask_numbers=False` digits stay digits (the words are the same, only their letters differ).
    """
    table = _CHAR_MAPS[mask_numbers]
    if text.isascii():
        return text.encode("ascii").translate(table.ascii_table)
    return table.map_text(text)[0].encode("utf-8")


def normalize_text(text: str, *, mask_numbers: bool = True) -> str:
    """The normalised form of `text`: folded words separated by single spaces, numbers "0"."""
    mapped = mapped_bytes(text, mask_numbers=mask_numbers)
    if mask_numbers and b"00" in mapped:
        mapped = _ZERO_RUN.sub(b"0", mapped)
    return b" ".join(mapped.split()).decode("utf-8")


def words(text: str, *, mask_numbers: bool = True) -> list[str]:
    """The normalised words of `text`, in order."""
    return normalize_text(text, mask_numbers=mask_numbers).split()


def word_spans(text: str) -> npt.NDArray[np.int64]:
    """Character span `[start, end)` in `text` of each normalised word, shape `(words, 2)`.

    Row i is the span of `words(text)[i]`; a word whose characters were folded together (a
    ligature, "½" -> "0 0") maps to the characters it came from.
    """
    origin = None  # one mapped character per character: positions are unchanged
    if text.isascii():
        codes: npt.NDArray[np.integer] = np.frombuffer(mapped_bytes(text), dtype=np.uint8)
    else:
        mapped, lengths = _CHAR_MAPS[True].map_text(text)
        codes = np.frombuffer(mapped.encode("utf-32-le"), dtype=np.uint32)
        if lengths is not None:  # some characters became several, or none
            origin = np.repeat(np.arange(len(text), dtype=np.int64), lengths)
    starts, ends = _word_bounds(codes != _SPACE)
    if origin is not None:
        starts, ends = origin[starts], origin[ends - 1] + 1
    return np.stack([starts, ends], axis=1)


def _word_bounds(in_word: npt.NDArray[np.bool_]) -> tuple[I64, I64]:
    """Start and end (exclusive) of each run of True."""
    padded = np.concatenate(([False], in_word, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1]).astype(np.int64)
    return edges[0::2], edges[1::2]


class _Powers:
    """base**i and base**-i modulo 2**64 for i < size, grown on demand."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.inverse = pow(base, -1, 1 << 64)
        self.up: U64 = np.ones(1, dtype=np.uint64)
        self.down: U64 = np.ones(1, dtype=np.uint64)

    def get(self, size: int) -> tuple[U64, U64]:
        if size > len(self.up):
            grown = max(size, 2 * len(self.up), 1 << 16)
            self.up = _power_series(self.base, grown)
            self.down = _power_series(self.inverse, grown)
        return self.up, self.down


def _power_series(base: int, size: int) -> U64:
    series = np.full(size, base, dtype=np.uint64)
    series[0] = 1
    return np.cumprod(series, dtype=np.uint64)


_BYTE_POWERS = _Powers(_BYTE_BASE)
_WORD_POWERS = _Powers(_WORD_BASE)


def _mix64(values: U64) -> U64:
    """splitmix64's finaliser: spreads every input bit over the 64 output bits."""
    z = values ^ (values >> np.uint64(30))
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def word_hashes(text: str, *, mask_numbers: bool = True) -> U64:
    """uint64 hash of each normalised word of `text` (the words of `words(text)`, in order).

    `mask_numbers=False` hashes the digits as they are ("2017" is not "1998"); the words, and so
    the positions, are the same either way.
    """
    return batch_word_hashes([text], mask_numbers=mask_numbers)[0]


def batch_word_hashes(
    texts: Sequence[str], *, mask_numbers: bool = True
) -> tuple[U64, npt.NDArray[np.int64]]:
    """The word hashes of several texts end to end, and how many words each text has.

    One numpy pass over the whole batch: the per-call overhead is paid once, not per text.
    """
    mapped = [mapped_bytes(text, mask_numbers=mask_numbers) for text in texts]
    # A space between texts: no word runs across two of them.
    data = np.frombuffer(b" ".join(mapped), dtype=np.uint8)
    text_starts = np.zeros(len(mapped), dtype=np.int64)
    if len(mapped) > 1:
        np.cumsum([len(m) + 1 for m in mapped[:-1]], out=text_starts[1:])
    kept: I64 | None = None
    if mask_numbers and any(b"00" in m for m in mapped):
        # A run of digits is one "0": drop each "0" that follows a "0".
        zero = data == _ZERO
        keep = np.concatenate(([True], ~(zero[1:] & zero[:-1])))
        kept = np.flatnonzero(keep)
        data = data[keep]
    starts, ends = _word_bounds(data != _SPACE)
    origin = starts if kept is None else kept[starts]
    counts = np.bincount(
        np.searchsorted(text_starts, origin, side="right") - 1, minlength=len(mapped)
    ).astype(np.int64)
    if len(starts) == 0:
        return np.zeros(0, dtype=np.uint64), counts
    # Each word's bytes as a polynomial in the byte base, from a prefix sum over all bytes.
    up, down = _BYTE_POWERS.get(len(data) + 1)
    prefix = np.zeros(len(data) + 1, dtype=np.uint64)
    np.cumsum(data * up[: len(data)], dtype=np.uint64, out=prefix[1:])
    sums = (prefix[ends] - prefix[starts]) * down[starts]
    hashes = _mix64(sums ^ ((ends - starts).astype(np.uint64) * np.uint64(_LENGTH_SALT)))
    return hashes, counts


class NgramHasher:
    """Hashes of any runs of consecutive words of one word-hash sequence.

    Built once per sequence (one pass), then each n-gram hash costs O(1), whatever n, so many
    n-gram sizes can be hashed from the same words. The hash of words s .. s+n-1 is
    mix(sum(word[s + j] * B**j for j < n) + n * SALT) modulo 2**64, for a fixed odd B.
    """

    def __init__(self, hashes: U64) -> None:
        self.size = len(hashes)
        up, down = _WORD_POWERS.get(self.size + 1)
        self._down = down
        self._prefix = np.zeros(self.size + 1, dtype=np.uint64)
        np.cumsum(hashes * up[: self.size], dtype=np.uint64, out=self._prefix[1:])

    def at(self, starts: I64, lengths: I64 | int) -> U64:
        """Hashes of the runs of `lengths` words starting at each of `starts` (all in range)."""
        ends = starts + lengths
        # prefix[e] - prefix[s] is the window's sum scaled by B**s; B**-s scales it back.
        sums = (self._prefix[ends] - self._prefix[starts]) * self._down[starts]
        if isinstance(lengths, int):
            return _mix64(sums + np.uint64((lengths * _LENGTH_SALT) & _MASK64))
        return _mix64(sums + np.asarray(lengths, dtype=np.uint64) * np.uint64(_LENGTH_SALT))

    def all(self, n: int) -> U64:
        """Hashes of every n-gram, in order: max(0, size - n + 1) of them."""
        if n < 1:
            raise ValueError(f"n-gram size must be at least 1, got {n}")
        count = self.size - n + 1
        if count <= 0:
            return np.zeros(0, dtype=np.uint64)
        return self.at(np.arange(count, dtype=np.int64), n)


def ngram_hashes(hashes: U64, n: int) -> U64:
    """uint64 hash of every run of `n` consecutive words, given the words' hashes.

    Element i hashes words i .. i+n-1. The hash depends on n, so a 3-word sequence never equals
    a 13-gram by construction.
    """
    return NgramHasher(hashes).all(n)


def text_ngram_hashes(text: str, n: int) -> U64:
    """`ngram_hashes` of the normalised words of a raw text."""
    return ngram_hashes(word_hashes(text), n)


def sequence_hash(hashes: U64) -> int:
    """The hash of a whole word sequence, in [0, 2**64): `ngram_hashes(hashes, len(hashes))[0]`.

    0 for no words. A text of k words has exact hash h exactly when h is one of the k-gram
    hashes of a document that contains those k words in a row.
    """
    if len(hashes) == 0:
        return 0
    return int(ngram_hashes(hashes, len(hashes))[0])


def exact_hash(text: str) -> int:
    """`sequence_hash` of all the normalised words of `text`."""
    return sequence_hash(word_hashes(text))


# The hash of the word every number becomes: n-grams of numbers alone say nothing.
NUMBER_WORD_HASH = int(word_hashes("0")[0])
