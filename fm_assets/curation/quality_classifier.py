"""A DCLM-style fastText quality classifier: train it, load it, score texts with it.

Binary labels: `__label__hq` (curated article text) against `__label__lq` (boilerplate and
low-quality page text). Training and scoring pass every text through the same `preprocess`.
The model file is named by the sha256 of its own bytes, so a model is identified by its content.

    documents -> passages -> holdout split by group hash -> preprocess -> fastText (fresh
    process, thread=1) -> <sha256>.bin -> holdout metrics -> ClassifierReport

The default recipe (`default_training_data`) derives both classes from the shared
article-extraction benchmark: positives are the ground-truth article bodies, negatives are the
text of the same HTML pages that is not part of the article body (navigation, footers, link
lists, captions, cookie and subscription notices).

Nothing here imports Dagster, Ray or Iceberg: the CLI, the registry table and the filter stage
build on these functions.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
import unicodedata
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CLASSIFIER_RECIPE_VERSION = "quality_fasttext_v1"
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
class TrainingConfig:
    """fastText hyperparameters and the recipe's data handling; part of the model's identity.

    The defaults were chosen before looking at the holdout: fastText's small-data settings
    (high learning rate, many epochs, word bigrams) with a small `dim` and `bucket` so the model
    file stays ~15 MB. `thread=1` makes training deterministic.
    """

    epoch: int = 25
    lr: float = 0.5
    word_ngrams: int = 2
    dim: int = 32
    min_count: int = 2
    bucket: int = 100_000
    # fastText seeds std::minstd_rand with seed + block, so seeds 0 and 1 give the same model.
    seed: int = 0
    thread: int = 1
    holdout_fraction: float = 0.2
    max_chars: int = DEFAULT_MAX_CHARS
    # Documents are cut into passages of about this many characters at line breaks: more,
    # shorter examples than whole pages, and every example is about the same size.
    passage_chars: int = 1_000
    # Downsample the larger class in the training split (not the holdout) to the smaller one.
    balance_classes: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ValueError(
                f"holdout_fraction must be in (0, 1), got {self.holdout_fraction}: "
                "the report's holdout metrics need examples on both sides"
            )
        for name in ("epoch", "word_ngrams", "dim", "min_count", "thread", "max_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.passage_chars < 100:
            raise ValueError(f"passage_chars must be >= 100, got {self.passage_chars}")


@dataclass(frozen=True)
class TrainingDocument:
    """A training text and its split group: documents sharing a group land on the same side
    of the holdout split (pass the site, so a site's pages are never on both sides)."""

    text: str
    group: str


@dataclass(frozen=True)
class ClassifierReport:
    """What a training run produced and from what; `to_dict()` is JSON-serialisable.

    Counts are passages. `n_duplicate_passages` were dropped as repeats within a class or as
    present in both classes. Metrics are on the holdout passages with the decision
    P(hq) >= 0.5; precision and recall are those of the `hq` class. Score with the config's
    `max_chars`.
    """

    model_sha256: str
    model_path: Path
    recipe_version: str
    fasttext_version: str
    config: TrainingConfig
    n_positive_documents: int
    n_negative_documents: int
    n_train_pos: int
    n_train_neg: int
    n_holdout_pos: int
    n_holdout_neg: int
    n_dropped_by_balancing: int
    n_duplicate_passages: int
    holdout_accuracy: float
    holdout_precision: float
    holdout_recall: float
    # sha256 over the sorted "<sha256(text)> <group>" lines of each class's input documents.
    positives_sha256: str
    negatives_sha256: str
    sources: tuple[tuple[str, str], ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["model_path"] = str(self.model_path)
        out["sources"] = dict(self.sources)
        return out


def split_passages(text: str, passage_chars: int) -> list[str]:
    """Cut a text into passages of at most ~`passage_chars` characters, at line breaks where
    possible and at spaces inside longer lines; empty passages are dropped."""
    passages: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines():
        words = line.split()
        while words:
            # Take as many words of the line as fit in the current passage.
            take = 0
            added = 0
            while take < len(words) and size + added + len(words[take]) + 1 <= passage_chars:
                added += len(words[take]) + 1
                take += 1
            if take == 0 and not current:
                take, added = 1, len(words[0]) + 1  # one word longer than a passage
            if take:
                current.append(" ".join(words[:take]))
                size += added
                words = words[take:]
            if words:
                passages.append("\n".join(current))
                current, size = [], 0
    if current:
        passages.append("\n".join(current))
    return passages


def _sha256(data: str | bytes) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def in_holdout(group: str, fraction: float) -> bool:
    """Whether documents of `group` belong to the holdout split (a hash, not a random draw)."""
    return int(_sha256(f"holdout:{group}")[:16], 16) < fraction * 2**64


def _as_documents(texts: Sequence[str | TrainingDocument]) -> list[TrainingDocument]:
    return [
        t if isinstance(t, TrainingDocument) else TrainingDocument(t, _sha256(t)) for t in texts
    ]


def _inputs_sha256(docs: Sequence[TrainingDocument]) -> str:
    return _sha256("\n".join(sorted(f"{_sha256(d.text)} {d.group}" for d in docs)))


def _fasttext_version() -> str:
    for dist in ("fasttext", "fasttext-numpy2", "fasttext-wheel"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


# fastText 0.9.3 allocates the input matrix uninitialised (posix_memalign) and, with thread < 10,
# randomises only its first thread/10: the rest is whatever the allocator hands back. Measured
# here: the first training in a process gets fresh zero pages and is deterministic; a second one
# reuses the first model's freed memory and fails with "Encountered NaN". So each training runs
# in a fresh interpreter with MALLOC_PERTURB_=255, which makes glibc zero every allocation: the
# matrix then starts exactly as upstream fastText's zero-initialised one, whatever its size.
_TRAIN_PROGRAM = """
import json, sys
import fasttext
request = json.loads(sys.argv[1])
fasttext.train_supervised(**request["params"]).save_model(request["output"])
"""


def _train_in_fresh_process(train_file: Path, output: Path, config: TrainingConfig) -> None:
    params = {
        "input": str(train_file),
        "epoch": config.epoch,
        "lr": config.lr,
        "wordNgrams": config.word_ngrams,
        "dim": config.dim,
        "minCount": config.min_count,
        "bucket": config.bucket,
        "seed": config.seed,
        "thread": config.thread,
        "loss": "softmax",
        "verbose": 0,
    }
    # glibc fills each allocation with the complement of MALLOC_PERTURB_: 255 -> zeros. A
    # GLIBC_TUNABLES perturb setting would override it.
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env["MALLOC_PERTURB_"] = "255"
    request = json.dumps({"params": params, "output": str(output)})
    done = subprocess.run(
        [sys.executable, "-c", _TRAIN_PROGRAM, request],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not output.is_file():
        raise RuntimeError(
            f"fastText training failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}; "
            "a NaN means the learning rate is too high for this data: lower TrainingConfig.lr"
        )


def train_classifier(
    positives: Sequence[str | TrainingDocument],
    negatives: Sequence[str | TrainingDocument],
    out_dir: Path,
    config: TrainingConfig | None = None,
    sources: Mapping[str, str] | None = None,
) -> ClassifierReport:
    """Train an hq/lq fastText classifier and save it as `out_dir/<sha256 of the file>.bin`.

    Plain strings are their own split group. The holdout split hashes each group, so it is
    deterministic and independent of input order; training examples are ordered by their hash
    for the same reason. `sources` describes where the inputs came from (kept in the report).
    """
    config = config or TrainingConfig()
    pos_docs, neg_docs = _as_documents(positives), _as_documents(negatives)
    # (label, passage, in holdout), deduplicated per label; passages present under both labels
    # are contradictory and dropped.
    seen: dict[str, dict[str, bool]] = {HQ_LABEL: {}, LQ_LABEL: {}}
    n_passages = 0
    for label, docs in ((HQ_LABEL, pos_docs), (LQ_LABEL, neg_docs)):
        for doc in docs:
            held_out = in_holdout(doc.group, config.holdout_fraction)
            for passage in split_passages(doc.text, config.passage_chars):
                if preprocess(passage, config.max_chars):
                    n_passages += 1
                    seen[label].setdefault(passage, held_out)
    both = seen[HQ_LABEL].keys() & seen[LQ_LABEL].keys()
    split: dict[tuple[str, bool], list[str]] = {}
    for label, passages in seen.items():
        for passage, held_out in passages.items():
            if passage not in both:
                split.setdefault((label, held_out), []).append(passage)
    n_unique = sum(len(v) for v in split.values())

    train = {label: sorted(split.get((label, False), []), key=_sha256) for label in seen}
    holdout = {label: split.get((label, True), []) for label in seen}
    for label in seen:
        if not train[label] or not holdout[label]:
            raise ValueError(
                f"no {label} passages in the {'training' if not train[label] else 'holdout'} "
                f"split ({len(pos_docs)} positive, {len(neg_docs)} negative documents): "
                "supply more documents from more groups, or change holdout_fraction"
            )
    n_dropped = 0
    if config.balance_classes:
        keep = min(len(train[HQ_LABEL]), len(train[LQ_LABEL]))
        n_dropped = len(train[HQ_LABEL]) + len(train[LQ_LABEL]) - 2 * keep
        train = {label: passages[:keep] for label, passages in train.items()}

    examples = [(label, p) for label, passages in train.items() for p in passages]
    examples.sort(key=lambda e: _sha256(f"{e[0]} {e[1]}"))
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".training-") as tmp:
        train_file = Path(tmp) / "train.txt"
        with train_file.open("w", encoding="utf-8") as f:
            for label, passage in examples:
                f.write(f"{label} {preprocess(passage, config.max_chars)}\n")
        tmp_model = Path(tmp) / "model.bin"
        _train_in_fresh_process(train_file, tmp_model, config)
        model_sha256 = _sha256(tmp_model.read_bytes())
        model_path = out_dir / f"{model_sha256}.bin"
        os.replace(tmp_model, model_path)

    classifier = load_classifier(model_path)
    hq_scores = score_texts(classifier, holdout[HQ_LABEL], max_chars=config.max_chars)
    lq_scores = score_texts(classifier, holdout[LQ_LABEL], max_chars=config.max_chars)
    true_pos = sum(s >= 0.5 for s in hq_scores)
    false_pos = sum(s >= 0.5 for s in lq_scores)
    n_holdout = len(hq_scores) + len(lq_scores)
    return ClassifierReport(
        model_sha256=model_sha256,
        model_path=model_path,
        recipe_version=CLASSIFIER_RECIPE_VERSION,
        fasttext_version=_fasttext_version(),
        config=config,
        n_positive_documents=len(pos_docs),
        n_negative_documents=len(neg_docs),
        n_train_pos=len(train[HQ_LABEL]),
        n_train_neg=len(train[LQ_LABEL]),
        n_holdout_pos=len(hq_scores),
        n_holdout_neg=len(lq_scores),
        n_dropped_by_balancing=n_dropped,
        n_duplicate_passages=n_passages - n_unique,
        holdout_accuracy=(true_pos + len(lq_scores) - false_pos) / n_holdout,
        holdout_precision=true_pos / (true_pos + false_pos) if true_pos + false_pos else 0.0,
        holdout_recall=true_pos / len(hq_scores),
        positives_sha256=_inputs_sha256(pos_docs),
        negatives_sha256=_inputs_sha256(neg_docs),
        sources=tuple(sorted((sources or {}).items())),
    )


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
    sha256 = _sha256(data)
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


# --- The default recipe: the shared article-extraction benchmark -------------------------------

BENCHMARK = Path("extraction") / "article-extraction-benchmark"
_SKIPPED_TAGS = frozenset(
    "script style noscript template svg head iframe object canvas math select".split()  # noqa: SIM905
)
# Elements that start a new line of visible text.
_BLOCK_TAGS = frozenset(
    """address article aside blockquote br button caption dd details dialog div dl dt fieldset
    figcaption figure footer form h1 h2 h3 h4 h5 h6 header hr img label li main menu nav ol
    option p pre section summary table tbody td tfoot th thead tr ul""".split()  # noqa: SIM905
)
_WORD = re.compile(r"\w+")


def page_lines(html: bytes) -> list[str]:
    """The visible text of an HTML page, one line per block element (scripts, styles and the
    head dropped), whitespace collapsed, empty lines dropped."""
    import lxml.html

    parser = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True)
    root = lxml.html.document_fromstring(html, parser=parser)
    lines: list[str] = []
    current: list[str] = []

    def flush() -> None:
        line = " ".join(" ".join(current).split())
        if line:
            lines.append(line)
        current.clear()

    # An explicit stack, not recursion: some pages nest deeper than Python's recursion limit.
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        element, closing = stack.pop()
        tag = element.tag.lower() if isinstance(element.tag, str) else None
        if closing:
            if tag in _BLOCK_TAGS:
                flush()
            if element.tail:
                current.append(element.tail)
            continue
        if tag is None or tag in _SKIPPED_TAGS:
            if element.tail:
                current.append(element.tail)
            continue
        if tag in _BLOCK_TAGS:
            flush()
        if element.text:
            current.append(element.text)
        stack.append((element, True))
        stack.extend((child, False) for child in reversed(element))
    flush()
    return lines


def boilerplate_lines(lines: Sequence[str], article: str) -> list[str]:
    """The lines that are not part of `article`, each once, in page order.

    A line of three or more words belongs to the article when at least half of its word
    trigrams occur in it; a shorter line when its words occur there contiguously.
    """
    words = _WORD.findall(article.lower())
    trigrams = set(zip(words, words[1:], words[2:], strict=False))
    joined = f" {' '.join(words)} "
    out: list[str] = []
    seen: set[str] = set()
    for line in lines:
        tokens = _WORD.findall(line.lower())
        if not tokens or line in seen:
            continue
        if len(tokens) < 3:
            in_article = f" {' '.join(tokens)} " in joined
        else:
            grams = list(zip(tokens, tokens[1:], tokens[2:], strict=False))
            in_article = sum(g in trigrams for g in grams) >= 0.5 * len(grams)
        if not in_article:
            seen.add(line)
            out.append(line)
    return out


def default_training_data(
    shared_data: Path,
) -> tuple[list[TrainingDocument], list[TrainingDocument], dict[str, str]]:
    """The default recipe's (positives, negatives, sources) from the shared benchmark.

    Positives: each page's ground-truth `articleBody`. Negatives: the page's boilerplate lines
    (`boilerplate_lines` of `page_lines`) joined into one document per page. Both are grouped by
    the page's host, so a site's article and its navigation are on the same side of the holdout
    split and no site's template is seen in training and scored in the holdout.
    """
    base = shared_data / BENCHMARK
    truth_file = base / "ground-truth.json"
    if not truth_file.is_file():
        raise ValueError(f"{truth_file} is missing: the default recipe reads the shared data")
    truth = json.loads(truth_file.read_text(encoding="utf-8"))
    positives: list[TrainingDocument] = []
    negatives: list[TrainingDocument] = []
    for page_id in sorted(truth):
        article = truth[page_id]["articleBody"]
        host = urllib.parse.urlsplit(truth[page_id]["url"]).hostname or page_id
        group = host.removeprefix("www.")
        positives.append(TrainingDocument(article, group))
        html = gzip.decompress((base / "html" / f"{page_id}.html.gz").read_bytes())
        boilerplate = boilerplate_lines(page_lines(html), article)
        if boilerplate:
            negatives.append(TrainingDocument("\n".join(boilerplate), group))
    sources = {
        "positives": f"{BENCHMARK}/ground-truth.json: articleBody of {len(positives)} pages",
        "negatives": (
            f"{BENCHMARK}/html/*.html.gz: block-level page text not in the articleBody, "
            f"{len(negatives)} pages"
        ),
        "holdout_groups": "page host (www. stripped)",
    }
    return positives, negatives, sources
