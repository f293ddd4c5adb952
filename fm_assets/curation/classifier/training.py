"""Train a DCLM-style hq/lq fastText quality classifier: passages, a holdout split by group hash,
fastText in a fresh process, a model file named by its sha256, and a `ClassifierReport`.

The recipe and its reasons: docs/curation.md (Quality classifier).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fm_assets.curation.classifier.scoring import (
    DEFAULT_MAX_CHARS,
    HQ_LABEL,
    LQ_LABEL,
    load_classifier,
    preprocess,
    score_texts,
)

CLASSIFIER_RECIPE_VERSION = "quality_fasttext_v1"


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
