"""Score texts with an hq/lq fastText quality classifier: the `preprocess` that training and
scoring share, loading a model file (checked against its content-hash name), P(hq) per text.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HQ_LABEL = "__label__hq"
LQ_LABEL = "__label__lq"
DEFAULT_MAX_CHARS = 10_000

_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_PUNCTUATION = re.compile(r"([^\w\s])")
_SHA256_NAME = re.compile(r"[0-9a-f]{64}")


def preprocess(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Normalise a text into the one-line form the classifier is trained and scored on.

    1. keep the first `max_chars` characters (a 5 MB document costs no more than a short one);
    2. NFKC-normalise and lowercase;
    3. replace control characters and unencodable code points (lone surrogates) with spaces;
    4. remove fastText's label prefix `__label__`, so a text cannot inject a label;
    5. put spaces around every character that is neither a word character nor whitespace,
       so "end." and "end" are the same word;
    6. collapse all whitespace, newlines included, to single spaces.

    The result has no newline (fastText reads one example per line) and is idempotent:
    `preprocess(preprocess(t)) == preprocess(t)` for texts within the cap.
    """
    text = unicodedata.normalize("NFKC", text[:max_chars]).lower()
    text = text.encode("utf-8", "replace").decode("utf-8")
    text = _CONTROL_CHARS.sub(" ", text).replace("__label__", " ")
    return " ".join(_PUNCTUATION.sub(r" \1 ", text).split())


@dataclass(frozen=True)
class QualityClassifier:
    """A loaded model and the content hash that names it."""

    path: Path
    sha256: str
    model: Any = field(repr=False, compare=False)


@functools.lru_cache(maxsize=4)
def _load_cached(path: Path) -> QualityClassifier:
    import fasttext

    data = path.read_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    if _SHA256_NAME.fullmatch(path.stem) and path.stem != sha256:
        raise ValueError(
            f"classifier {path} is corrupt: its name says sha256 {path.stem}, its bytes hash "
            f"to {sha256}; retrain it with `fm classifier train` or restore the file"
        )
    model = fasttext.load_model(str(path))
    labels = set(model.get_labels())
    if labels != {HQ_LABEL, LQ_LABEL}:
        raise ValueError(f"{path} is not a quality classifier: its labels are {sorted(labels)}")
    return QualityClassifier(path, sha256, model)


def load_classifier(path: Path | str) -> QualityClassifier:
    """Load a model file once per process (later calls with the same path reuse it) and check
    that a content-hash name matches the bytes."""
    return _load_cached(Path(path).resolve())


def score_texts(
    classifier: QualityClassifier,
    texts: Sequence[str],
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    batch_size: int = 1024,
) -> list[float]:
    """P(hq) for each text, in order. A text with nothing left after `preprocess` scores 0.0.

    Pass the training config's `max_chars` if the model was trained with a non-default one.
    """
    scores = [0.0] * len(texts)
    for start in range(0, len(texts), batch_size):
        batch = [preprocess(t, max_chars) for t in texts[start : start + batch_size]]
        index = [i for i, t in enumerate(batch) if t]
        if not index:
            continue
        # Lists only: fastText 0.9.3 under numpy 2 fails on a single string.
        labels, probs = classifier.model.predict([batch[i] for i in index], k=2)
        for i, row_labels, row_probs in zip(index, labels, probs, strict=True):
            # fastText smooths log-probabilities, so a value may exceed 1 by ~1e-5.
            p_hq = dict(zip(row_labels, row_probs, strict=True)).get(HQ_LABEL, 0.0)
            scores[start + i] = min(1.0, max(0.0, float(p_hq)))
    return scores
