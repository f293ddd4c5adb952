"""MinHash LSH near-duplicate detection: vectorised shingling, signatures, band hashes and an index.

    texts ─normalise─▶ words ─hash─▶ word hashes ─5-grams─▶ shingle hashes (sorted, unique)
      ─MinHash, 112 permutations─▶ signature ─14 bands × 8 rows─▶ band hashes
      ─NearDupIndex: band lookup─▶ candidates ─exact Jaccard ≥ 0.8─▶ DupDecision

Normalisation (per code point, no context): lowercase with `str.lower`, drop every character
that is neither alphanumeric nor `_` (punctuation, symbols, controls, combining marks), treat
Unicode whitespace as a word separator. `normalize_words` is the readable definition; the batch
path applies the same map as a 0x110000-entry lookup table over the UTF-32 code points of a
whole batch, so there is no Python work per word.

Shingles are 5-grams of words (`MinHashConfig.ngram`). One edited word changes 5 shingles, so a
1,000-word copy with 10 scattered edits keeps J ≈ 0.9; below 5 the shingles are common phrases
that independent texts share; much above it a handful of edits pushes a true copy below 0.8. A
text with fewer than `ngram` words (but at least one) is one shingle of all its words. A text with
no words after normalisation (empty, only punctuation) has no shingles: it is never a duplicate,
never a candidate, never indexed and gets no index rows.

Hashes (fixed by `MINHASH_VERSION`): a word hashes to fmix64(Σ c_j·P^j + len·K) over its code
points c_j, a shingle to fmix64(Σ w_k·Q^k + n·K) over its word hashes w_k (mod 2^64). MinHash
uses datasketch's "affine32" scheme: the low 32 bits of the shingle hash, pre-mixed with the
32-bit MurmurHash3 finalizer, go through h ↦ a·h + b mod 2^32 with odd a. This replaces the
textbook (a·x + b) mod p: with an odd multiplier the map is a bijection (no collision bias, see
datasketch issue 212), it needs no division, and numpy runs it on uint32 SIMD lanes. The
permutations come from `datasketch.MinHash(num_perm, seed, scheme="affine32")` and are checked
against the draw this module pins, so a datasketch upgrade cannot silently change persisted band
hashes; the tests check the signatures equal datasketch's.

Bands: 14 × 8 = 112 permutations. A pair with Jaccard s becomes a candidate with probability
1 - (1 - s^8)^14; datasketch's own choice for threshold 0.8 at 112 permutations, 9 bands × 12
rows, is shown for comparison:

    Jaccard s               0.5      0.7      0.8      0.9
    14 × 8 (this default)   5.3%    56.5%    92.4%    99.96%
     9 × 12 (datasketch)    0.2%    11.8%    47.3%    95.0%

Candidates are confirmed by the exact Jaccard of their shingle sets, so false candidates cost
time but never a wrong decision; the price of the low rows is more candidates to confirm.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.storage.tables import TableSpec, declare

MINHASH_VERSION = "minhash_v1"

U64 = npt.NDArray[np.uint64]
U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]

# Persisted near-duplicate index: one row per (kept document, band). Hashes are uint64 bits
# stored as int64 (Iceberg has no unsigned types); view them back with `.view(np.uint64)`.
NEARDUP_INDEX_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("band", pa.int32(), nullable=False),  # 0 .. bands-1
        pa.field("band_hash", pa.int64(), nullable=False),  # band index is mixed in
        # The document's sorted, unique shingle hashes, on its band-0 row only (null otherwise),
        # so scans that only need the band lookup can skip the column.
        pa.field("shingle_hashes", pa.list_(pa.int64()), nullable=True),
        pa.field("index_config", pa.string(), nullable=False),  # MinHashConfig.index_config
    ]
)


# The global near-duplicate index: band hashes of every kept document of every batch.
declare(
    TableSpec(
        "neardup_index",
        pa.schema([pa.field("batch_id", pa.string(), nullable=False), *NEARDUP_INDEX_SCHEMA]),
        ("batch_id",),
    )
)

_MASK64 = (1 << 64) - 1
_CHAR_BASE = 0x9E3779B97F4A7C15  # P: odd, so invertible mod 2^64 (prefix sums need P^-1)
_WORD_BASE = 0xC2B2AE3D27D4EB4F  # Q
_LENGTH_MIX = 0x165667B19E3779F9  # K
_CHAR_INVERSE = pow(_CHAR_BASE, -1, 1 << 64)
_FMIX64 = (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)
_FMIX32 = (0x85EBCA6B, 0xC2B2AE35)
# Code points per vectorised group: bounds peak memory (~30 bytes a code point) for big batches.
_GROUP_CODE_POINTS = 4_000_000
_CHAR_POWERS: U64 = np.empty(0, dtype=np.uint64)
_CHAR_POWERS_MAX = 1 << 23
# Shingles per MinHash block: 256 KB of uint32 stays in L2 across the permutations.
_MINHASH_BLOCK = 65_536


@dataclass(frozen=True)
class MinHashConfig:
    """Near-duplicate parameters. `config_hash()` goes into provenance."""

    ngram: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1
    threshold: float = 0.8

    def __post_init__(self) -> None:
        for name in ("ngram", "bands", "rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MinHashConfig.{name} must be a positive int, got {value!r}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"MinHashConfig.seed must be in [0, 2**32), got {self.seed}")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"MinHashConfig.threshold must be in (0, 1], got {self.threshold}")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    @property
    def index_config(self) -> str:
        """What index rows depend on (not the threshold): rows of another config cannot mix."""
        shape = f"ngram={self.ngram}/bands={self.bands}x{self.rows}/seed={self.seed}"
        return f"{MINHASH_VERSION}/{shape}"

    def config_hash(self) -> str:
        fields = {"version": MINHASH_VERSION, **dataclasses.asdict(self)}
        payload = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def candidate_probability(self, jaccard: float) -> float:
        """Probability that a pair with this Jaccard shares at least one band."""
        return 1.0 - (1.0 - jaccard**self.rows) ** self.bands


# --- normalisation and hashing, scalar definitions ------------------------------------------


def normalize_words(text: str) -> list[str]:
    """The words of `text` by definition (slow, one character at a time)."""
    return "".join(map(_normalise_char, text)).split()


def _normalise_char(char: str) -> str:
    return "".join(
        low if low.isalnum() or low == "_" else " "
        for low in char.lower()
        if low.isalnum() or low == "_" or low.isspace()
    )


def word_hash(word: str) -> int:
    """64-bit hash of one normalised word (scalar definition of the vectorised path)."""
    total = 0
    power = 1
    for char in word:
        total = (total + ord(char) * power) & _MASK64
        power = (power * _CHAR_BASE) & _MASK64
    return _fmix64_int((total + len(word) * _LENGTH_MIX) & _MASK64)


def shingle_hash(word_hashes: Sequence[int]) -> int:
    """64-bit hash of one shingle given its words' `word_hash` values, in order."""
    total = 0
    power = 1
    for value in word_hashes:
        total = (total + value * power) & _MASK64
        power = (power * _WORD_BASE) & _MASK64
    return _fmix64_int((total + len(word_hashes) * _LENGTH_MIX) & _MASK64)


def _fmix64_int(h: int) -> int:
    h ^= h >> 33
    h = (h * _FMIX64[0]) & _MASK64
    h ^= h >> 33
    h = (h * _FMIX64[1]) & _MASK64
    return h ^ (h >> 33)


def _fmix64(h: U64) -> U64:
    """MurmurHash3's 64-bit finalizer, in place."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(_FMIX64[0])
    h ^= h >> np.uint64(33)
    h *= np.uint64(_FMIX64[1])
    h ^= h >> np.uint64(33)
    return h


def _fmix32(h: U32) -> U32:
    """MurmurHash3's 32-bit finalizer (datasketch's affine32 pre-mix), in place."""
    h ^= h >> np.uint32(16)
    h *= np.uint32(_FMIX32[0])
    h ^= h >> np.uint32(13)
    h *= np.uint32(_FMIX32[1])
    h ^= h >> np.uint32(16)
    return h


# --- vectorised shingling -------------------------------------------------------------------

_WORD_RUN = re.compile(r"\w+")
_SPACE_RUN = re.compile(r"\s+")


@functools.cache
def _code_point_map() -> U32:
    """code point -> normalised code point; 0 drops it, 0x20 separates words (~0.3 s, once)."""
    points = np.arange(1, 0x110000, dtype=np.uint32)
    points = points[(points < 0xD800) | (points > 0xDFFF)]  # lone surrogates map to 0: dropped
    # A NUL after each code point keeps str.lower()'s context rules (final sigma) out of it.
    spaced = np.zeros(2 * points.size, dtype=np.uint32)
    spaced[0::2] = points
    lowered = spaced.tobytes().decode("utf-32-le").lower()
    out = np.frombuffer(lowered.encode("utf-32-le"), dtype=np.uint32)
    ends = np.flatnonzero(out == 0)
    starts = np.concatenate(([0], ends[:-1] + 1))
    single = ends - starts == 1
    lower = out[starts[single]]
    # Classify the lowered characters by runs: letters sit in long blocks, so runs are few.
    text = lower.tobytes().decode("utf-32-le")
    is_word = np.zeros(lower.size, dtype=bool)
    is_space = np.zeros(lower.size, dtype=bool)
    for flags, pattern in ((is_word, _WORD_RUN), (is_space, _SPACE_RUN)):
        for run in pattern.finditer(text):
            flags[run.start() : run.end()] = True
    table = np.zeros(0x110000, dtype=np.uint32)
    table[points[single]] = np.where(is_word, lower, np.where(is_space, np.uint32(32), 0))
    for point in points[~single].tolist():  # lowercases to several characters (U+0130)
        normal = _normalise_char(chr(point))
        if len(normal) > 1:
            raise RuntimeError(f"U+{point:04X} normalises to {normal!r}; extend the map")
        table[point] = ord(normal) if normal else 0
    return table


def _char_powers(count: int) -> U64:
    """P^0 .. P^(count-1), sliced from a table grown on demand up to 2^23 entries (64 MB)."""
    global _CHAR_POWERS
    if count > _CHAR_POWERS.size:
        if count > _CHAR_POWERS_MAX:
            return _powers(_CHAR_BASE, count)
        _CHAR_POWERS = _powers(_CHAR_BASE, min(1 << (count - 1).bit_length(), _CHAR_POWERS_MAX))
    return _CHAR_POWERS[:count]


def _powers(base: int, count: int) -> U64:
    """base^0 .. base^(count-1) mod 2^64."""
    powers = np.full(count, base, dtype=np.uint64)
    powers[0] = 1
    return np.cumprod(powers, dtype=np.uint64)


def shingle_sets(texts: Sequence[str], ngram: int = 5) -> list[U64]:
    """Sorted unique uint64 shingle hashes of each text; empty for a text without words."""
    out: list[U64] = []
    group: list[str] = []
    size = 0
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be str, got {type(text).__name__}")
        if group and size + len(text) > _GROUP_CODE_POINTS:
            out.extend(_shingle_group(group, ngram))
            group, size = [], 0
        group.append(text)
        size += len(text) + 1
    if group:
        out.extend(_shingle_group(group, ngram))
    return out


def _shingle_group(texts: list[str], ngram: int) -> list[U64]:
    """`shingle_sets` of one group of texts, in a fixed number of numpy passes over it."""
    out: list[U64] = [np.empty(0, dtype=np.uint64) for _ in texts]
    # A space before and after every text: no word starts at 0, every text has an end mark.
    joined = " ".join(["", *texts, ""])
    points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    mapped = _code_point_map()[points]
    lengths = np.fromiter((len(t) + 1 for t in texts), dtype=np.int64, count=len(texts))
    mapped[np.cumsum(lengths)] = 1  # the map never yields 1: it marks each text's end
    chars = mapped[mapped != 0]
    text_ends = np.flatnonzero(chars == 1)

    # Word edges alternate start, end, start, ...: the first and last characters are no words.
    edges = np.flatnonzero(np.diff((chars > 32).view(np.int8))) + 1
    if edges.size == 0:
        return out
    word_starts, word_ends = edges[0::2], edges[1::2]
    word_lengths = word_ends - word_starts

    # Word hash Σ c_j·P^(j-start) from prefix sums of c_j·P^j, shifted back by P^-start.
    prefix = np.multiply(chars, _char_powers(chars.size), dtype=np.uint64)
    np.cumsum(prefix, out=prefix)
    words = prefix[word_ends - 1] - prefix[word_starts - 1]
    gaps = np.diff(word_starts, prepend=0)
    words *= np.cumprod(_powers(_CHAR_INVERSE, int(gaps.max()) + 1)[gaps], dtype=np.uint64)
    words += word_lengths.astype(np.uint64) * np.uint64(_LENGTH_MIX)
    words = _fmix64(words)

    word_text = np.searchsorted(text_ends, word_starts)
    counts = np.bincount(word_text, minlength=len(texts))
    first_word = np.concatenate(([0], np.cumsum(counts)[:-1]))
    word_powers = _powers(_WORD_BASE, ngram)

    # Full n-grams over the whole group; keep those whose first and last word share a text.
    windows = words.size - ngram + 1
    full: U64 = np.empty(0, dtype=np.uint64)
    if windows > 0:
        full = words[:windows].copy()
        for k in range(1, ngram):
            full += words[k : k + windows] * word_powers[k]
        full += np.uint64(ngram * _LENGTH_MIX & _MASK64)
        full = _fmix64(full)
        full = full[word_text[:windows] == word_text[ngram - 1 :]]

    # A text shorter than n words is one shingle of all its words.
    short = np.flatnonzero((counts > 0) & (counts < ngram))
    short_hash = np.zeros(short.size, dtype=np.uint64)
    for k in range(ngram - 1):
        has = counts[short] > k
        short_hash[has] += words[first_word[short[has]] + k] * word_powers[k]
    short_hash += counts[short].astype(np.uint64) * np.uint64(_LENGTH_MIX)
    short_hash = _fmix64(short_hash)

    full_counts = np.maximum(counts - ngram + 1, 0)
    full_starts = np.concatenate(([0], np.cumsum(full_counts)))
    for i, text in enumerate(short.tolist()):
        out[text] = short_hash[i : i + 1].copy()
    for text in np.flatnonzero(full_counts).tolist():
        out[text] = np.unique(full[full_starts[text] : full_starts[text + 1]])
    return out


# --- MinHash and bands ----------------------------------------------------------------------


@functools.cache
@functools.lru_cache(maxsize=8)
def permutations(num_perm: int, seed: int) -> tuple[U32, U32]:
    """(a, b) of h ↦ a·h + b mod 2^32: datasketch's own affine32 permutations.

    They are checked against the draw this module pins (odd a, any b, from RandomState(seed)):
    persisted band hashes depend on them, so a datasketch release that drew differently must
    fail loudly rather than silently split the index in two.
    """
    from datasketch import MinHash

    drawn = np.asarray(
        MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations, dtype=np.uint32
    )
    generator = np.random.RandomState(seed)
    a = generator.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = generator.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    if drawn.shape != (2, num_perm) or not (
        np.array_equal(drawn[0], a) and np.array_equal(drawn[1], b)
    ):
        raise RuntimeError(
            "datasketch's affine32 permutations differ from the ones the near-dup index was "
            f"built with ({MINHASH_VERSION}); pin the datasketch version or rebuild the index"
        )
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


def signatures(shingles: Sequence[U64], config: MinHashConfig) -> U32:
    """(documents × num_perm) uint32 MinHash signatures; all 0xFFFFFFFF for an empty set."""
    a, b = permutations(config.num_perm, config.seed)
    out = np.full((len(shingles), config.num_perm), 0xFFFFFFFF, dtype=np.uint32)
    nonempty = np.fromiter((s.size > 0 for s in shingles), dtype=bool, count=len(shingles))
    rows = np.flatnonzero(nonempty)
    if rows.size == 0:
        return out
    parts = [shingles[i] for i in rows.tolist()]
    values = _fmix32(np.concatenate(parts).astype(np.uint32))  # low 32 bits, as datasketch
    starts = np.concatenate(([0], np.cumsum([p.size for p in parts])))
    mins = np.full((config.num_perm, rows.size), 0xFFFFFFFF, dtype=np.uint32)
    scratch = np.empty(min(_MINHASH_BLOCK, values.size), dtype=np.uint32)
    # One permutation at a time over a cache-sized block of contiguous values: 3-8× faster
    # in numpy than broadcasting a (block × num_perm) matrix.
    for begin in range(0, values.size, _MINHASH_BLOCK):
        end = min(begin + _MINHASH_BLOCK, values.size)
        block, permuted = values[begin:end], scratch[: end - begin]
        first = int(np.searchsorted(starts, begin, side="right")) - 1
        last = int(np.searchsorted(starts, end, side="left"))
        local = np.maximum(starts[first:last], begin) - begin
        for k in range(config.num_perm):
            np.multiply(block, a[k], out=permuted)
            permuted += b[k]
            target = mins[k, first:last]
            np.minimum(target, np.minimum.reduceat(permuted, local), out=target)
    out[rows] = mins.T
    return out


def band_hashes(signature: U32, config: MinHashConfig) -> U64:
    """(documents × bands) uint64: each band's `rows` values hashed together with its index."""
    docs = signature.shape[0]
    rows = signature.reshape(docs, config.bands, config.rows).astype(np.uint64)
    h = np.tile(np.arange(1, config.bands + 1, dtype=np.uint64), (docs, 1))
    h = _fmix64(h * np.uint64(_LENGTH_MIX))
    for r in range(config.rows):
        h = _fmix64(h * np.uint64(_WORD_BASE) + rows[:, :, r])
    return h


def jaccard(a: U64, b: U64) -> float:
    """Exact Jaccard of two sorted unique arrays (0.0 when both are empty)."""
    inter = _intersection_size(a, b)
    union = a.size + b.size - inter
    return inter / union if union else 0.0


def containment(part: U64, whole: U64) -> float:
    """|part ∩ whole| / |part| of sorted unique arrays (0.0 when `part` is empty)."""
    return _intersection_size(part, whole) / part.size if part.size else 0.0


def _intersection_size(a: U64, b: U64) -> int:
    if a.size > b.size:
        a, b = b, a
    if a.size == 0:
        return 0
    at = np.minimum(np.searchsorted(b, a), b.size - 1)
    return int(np.count_nonzero(b[at] == a))


@dataclass(frozen=True)
class BatchSketch:
    """What the index needs of each text of a batch: its shingle set and its band hashes."""

    shingles: list[U64]  # sorted unique uint64 per text
    bands: U64  # (texts × bands)


def sketch(texts: Sequence[str], config: MinHashConfig) -> BatchSketch:
    """Shingles, MinHash signatures and band hashes of a batch; pure, safe to run in workers."""
    shingles = shingle_sets(texts, config.ngram)
    return BatchSketch(shingles, band_hashes(signatures(shingles, config), config))


# --- the index ------------------------------------------------------------------------------

# doc_ids -> their shingle hashes (any order, uint64 or their int64 bits), for documents whose
# index rows were loaded without the `shingle_hashes` column.
ShinglesLookup = Callable[[Sequence[str]], Sequence[npt.ArrayLike]]


@dataclass(frozen=True)
class DupDecision:
    """`duplicate_of` is the kept document with the highest exact Jaccard ≥ threshold, else
    None; `jaccard` is that best candidate's exact Jaccard (0.0 without candidates)."""

    doc_id: str
    duplicate_of: str | None
    jaccard: float
    num_shingles: int

    @property
    def is_duplicate(self) -> bool:
        return self.duplicate_of is not None


class NearDupIndex:
    """Band hash → kept document, plus each kept document's shingle set for confirmation.

    Load earlier batches with `from_rows`/`add_rows` (NEARDUP_INDEX_SCHEMA rows), run
    `find_duplicates` per batch, append `new_index_rows()` to the persistent table. A document
    id already in the index is kept again without new rows, so a retried batch is harmless.

    Memory: the band lookup costs 16 bytes per (document, band); shingle sets 8 bytes per word.
    To hold only the lookup, load rows without `shingle_hashes` and pass `shingles_of`: it is
    called once per batch with the candidates whose shingles are not in memory yet.
    """

    def __init__(
        self, config: MinHashConfig | None = None, shingles_of: ShinglesLookup | None = None
    ) -> None:
        self.config = config or MinHashConfig()
        self._shingles_of = shingles_of
        self._doc_ids: list[str] = []
        self._number: dict[str, int] = {}
        self._shingles: list[U64 | None] = []
        self._runs: list[tuple[U64, I64]] = []  # sorted band hashes, their document numbers
        self._new: list[tuple[int, U64]] = []  # kept here: (document number, band hashes)

    @classmethod
    def from_rows(
        cls,
        rows: pa.Table,
        config: MinHashConfig | None = None,
        shingles_of: ShinglesLookup | None = None,
    ) -> NearDupIndex:
        index = cls(config, shingles_of)
        index.add_rows(rows)
        return index

    def __len__(self) -> int:
        return len(self._doc_ids)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._number

    def add_rows(self, rows: pa.Table) -> None:
        """Index documents kept by earlier batches from NEARDUP_INDEX_SCHEMA rows."""
        missing = {"doc_id", "band", "band_hash"} - set(rows.column_names)
        if missing:
            raise ValueError(f"index rows lack columns {sorted(missing)}; see NEARDUP_INDEX_SCHEMA")
        if rows.num_rows == 0:
            return
        if "index_config" in rows.column_names:
            found = set(pc.unique(rows.column("index_config")).to_pylist())
            if found != {self.config.index_config}:
                raise ValueError(
                    f"index rows were built with {sorted(map(str, found))}, this index uses "
                    f"{self.config.index_config!r}; rebuild the near-dup index under this config"
                )
        bands = rows.column("band").to_numpy()
        if bands.min() < 0 or bands.max() >= self.config.bands:
            raise ValueError(f"index rows have bands outside 0..{self.config.bands - 1}")
        encoded = pc.dictionary_encode(rows.column("doc_id").combine_chunks())
        numbers = np.array([self._number_of(d) for d in encoded.dictionary.to_pylist()])
        docs = numbers[encoded.indices.to_numpy()].astype(np.int64)
        hashes = rows.column("band_hash").to_numpy().astype(np.int64).view(np.uint64)
        self._add_run(hashes, docs)
        if "shingle_hashes" in rows.column_names:
            lists = rows.column("shingle_hashes").combine_chunks()
            offsets = lists.offsets.to_numpy()
            values = lists.values.to_numpy()
            present = np.flatnonzero(lists.is_valid().to_numpy(zero_copy_only=False))
            for row in present.tolist():
                stored = values[offsets[row] : offsets[row + 1]]
                self._shingles[int(docs[row])] = _as_shingle_set(stored)

    def find_duplicates(self, doc_ids: Sequence[str], texts: Sequence[str]) -> list[DupDecision]:
        """Decide a batch in order; kept documents join the index (later ones dedup against
        them). Duplicate ids within the batch are rejected."""
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} doc_ids but {len(texts)} texts")
        return self.decide(doc_ids, sketch(texts, self.config))

    def decide(self, doc_ids: Sequence[str], batch: BatchSketch) -> list[DupDecision]:
        """`find_duplicates` on a sketch made elsewhere (e.g. by parallel workers)."""
        shingles, bands = batch.shingles, batch.bands
        if not len(doc_ids) == len(shingles) == bands.shape[0]:
            raise ValueError(f"{len(doc_ids)} doc_ids for a sketch of {len(shingles)} texts")
        if bands.shape[1] != self.config.bands:
            raise ValueError(f"sketch has {bands.shape[1]} bands, the index {self.config.bands}")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("doc_ids repeat within the batch; run exact deduplication first")
        for doc_id in doc_ids:
            if not isinstance(doc_id, str):
                raise TypeError(f"doc_ids must be str, got {type(doc_id).__name__}")
        active = [i for i, s in enumerate(shingles) if s.size and doc_ids[i] not in self._number]
        earlier = self._earlier_candidates(bands, active)
        self._fetch_shingles(sorted({c for found in earlier.values() for c in found}))
        shared = self._shared_in_batch(bands, active)

        decisions: list[DupDecision] = []
        new_before = len(self._new)
        kept_here: dict[int, list[int]] = {}  # band hash shared in this batch -> kept numbers
        for i, (doc_id, own) in enumerate(zip(doc_ids, shingles, strict=True)):
            if own.size == 0 or doc_id in self._number:
                decisions.append(DupDecision(doc_id, None, 0.0, int(own.size)))
                continue
            candidates = set(earlier.get(i, ()))
            for h in shared.get(i, ()):
                candidates.update(kept_here.get(h, ()))
            best, best_j = -1, 0.0
            for c in sorted(candidates):
                j = jaccard(own, self._candidate_shingles(c))
                if j > best_j:
                    best, best_j = c, j
            if best >= 0 and best_j >= self.config.threshold:
                decisions.append(DupDecision(doc_id, self._doc_ids[best], best_j, int(own.size)))
                continue
            number = self._number_of(doc_id)
            self._shingles[number] = own
            self._new.append((number, bands[i]))
            for h in shared.get(i, ()):
                kept_here.setdefault(h, []).append(number)
            decisions.append(DupDecision(doc_id, None, best_j, int(own.size)))
        added = self._new[new_before:]
        if added:
            numbers = np.repeat(np.array([n for n, _ in added]), self.config.bands)
            self._add_run(np.concatenate([h for _, h in added]), numbers)
        return decisions

    def new_index_rows(self) -> pa.Table:
        """NEARDUP_INDEX_SCHEMA rows of every document `find_duplicates` kept in this index
        (rows loaded with `add_rows` are not repeated)."""
        count, bands = len(self._new), self.config.bands
        if count == 0:
            return NEARDUP_INDEX_SCHEMA.empty_table()
        sets = [self._candidate_shingles(n) for n, _ in self._new]
        lengths = np.zeros(count * bands, dtype=np.int64)
        lengths[0::bands] = [s.size for s in sets]
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        if offsets[-1] >= 2**31:
            raise ValueError("over 2**31 shingles in one index append; call per smaller batch")
        band = np.tile(np.arange(bands, dtype=np.int32), count)
        shingle_lists = pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)),
            pa.array(np.concatenate(sets).view(np.int64)),
            mask=pa.array(band != 0),
        )
        ids = [self._doc_ids[n] for n, _ in self._new]
        columns = [
            pa.array(np.repeat(np.array(ids, dtype=object), bands), pa.string()),
            pa.array(band),
            pa.array(np.concatenate([h for _, h in self._new]).view(np.int64)),
            shingle_lists,
            pa.array([self.config.index_config] * (count * bands), pa.string()),
        ]
        return pa.Table.from_arrays(columns, schema=NEARDUP_INDEX_SCHEMA)

    # -- internals

    def _number_of(self, doc_id: str) -> int:
        number = self._number.get(doc_id)
        if number is None:
            number = self._number[doc_id] = len(self._doc_ids)
            self._doc_ids.append(doc_id)
            self._shingles.append(None)
        return number

    def _add_run(self, hashes: U64, docs: I64) -> None:
        # Runs of geometrically shrinking size: O(log n) runs to search, each entry re-sorted
        # O(log n) times over the index's life, instead of re-sorting everything per batch.
        order = np.argsort(hashes, kind="stable")
        self._runs.append((hashes[order], docs[order]))
        while len(self._runs) > 1 and 2 * self._runs[-1][0].size >= self._runs[-2][0].size:
            (h1, d1), (h2, d2) = self._runs.pop(), self._runs.pop()
            merged = np.concatenate((h2, h1))
            order = np.argsort(merged, kind="stable")
            self._runs.append((merged[order], np.concatenate((d2, d1))[order]))

    def _earlier_candidates(self, bands: U64, active: list[int]) -> dict[int, set[int]]:
        """Batch position -> numbers of indexed documents sharing a band hash with it."""
        found: dict[int, set[int]] = {}
        if not active or not self._runs:
            return found
        query = bands[active].ravel()
        position = np.repeat(np.array(active), self.config.bands)
        for hashes, docs in self._runs:
            lo = np.searchsorted(hashes, query, side="left")
            hi = np.searchsorted(hashes, query, side="right")
            for q in np.flatnonzero(hi > lo).tolist():
                found.setdefault(int(position[q]), set()).update(docs[lo[q] : hi[q]].tolist())
        return found

    def _shared_in_batch(self, bands: U64, active: list[int]) -> dict[int, list[int]]:
        """Batch position -> its band hashes that another document of the batch also has."""
        if len(active) < 2:
            return {}
        values, counts = np.unique(bands[active].ravel(), return_counts=True)
        repeated = values[counts > 1]
        shared: dict[int, list[int]] = {}
        hit = np.isin(bands[active], repeated)
        for row in np.flatnonzero(hit.any(axis=1)).tolist():
            shared[active[row]] = bands[active[row]][hit[row]].tolist()
        return shared

    def _fetch_shingles(self, numbers: list[int]) -> None:
        missing = [n for n in numbers if self._shingles[n] is None]
        if not missing:
            return
        ids = [self._doc_ids[n] for n in missing]
        if self._shingles_of is None:
            raise ValueError(
                f"index rows for {ids[:3]} carry no shingle_hashes and no shingles_of lookup "
                "was given; load the shingle_hashes column or pass shingles_of"
            )
        fetched = self._shingles_of(ids)
        if len(fetched) != len(ids):
            raise ValueError(f"shingles_of returned {len(fetched)} sets for {len(ids)} doc_ids")
        for number, values in zip(missing, fetched, strict=True):
            self._shingles[number] = _as_shingle_set(np.asarray(values))

    def _candidate_shingles(self, number: int) -> U64:
        shingles = self._shingles[number]
        if shingles is None:
            raise RuntimeError(f"shingles of {self._doc_ids[number]} were not fetched")
        return shingles


def _as_shingle_set(values: npt.NDArray[np.generic]) -> U64:
    """Sorted unique uint64 from stored values (int64 bits or uint64)."""
    out = values.view(np.uint64) if values.dtype == np.int64 else values.astype(np.uint64)
    if out.size > 1 and not bool(np.all(out[1:] > out[:-1])):
        out = np.unique(out)
    return out
