"""The main job on embedded defaults: sample data -> batch -> curated tables -> version -> shards.

With no input files it writes a small sample of its own (generated prose as JSONL, an HTML page
and a WARC with a few responses, plus a duplicate and some broken records so the quarantine has
something to show). Third-party data is never copied into the repository. The sample is curated
under its source's policy: without FM_POLICY_FILE the default web policy, whose repetition rules
drop most of the generated prose (a small grammar repeats its phrases), with the reasons logged;
the default quality classifier is trained on first need from FM_SHARED_DATA.
"""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import fm_loader
from fm_assets.commands.operations import Log, build_shards, create_version, land, run_batch
from fm_assets.curation.policy import load_policy
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings
from fm_assets.versions.dataset_version import drop_summary

_WORDS = {
    "subject": [
        "the river",
        "a small village",
        "the old library",
        "our research team",
        "the committee",
        "a young engineer",
        "the city council",
        "this method",
        "the northern forest",
        "every student",
    ],
    "verb": [
        "describes",
        "changed",
        "supports",
        "measured",
        "improved",
        "questioned",
        "protected",
        "explained",
        "connected",
        "documented",
    ],
    "object": [
        "the local economy",
        "a new bridge",
        "the water supply",
        "several rare plants",
        "the results",
        "the annual festival",
        "public transport",
        "the harvest",
        "an early manuscript",
        "the school",
    ],
    "tail": [
        "over many years",
        "after the long winter",
        "with great care",
        "in the spring",
        "despite the cost",
        "for the first time",
        "without much help",
        "during the survey",
    ],
}
_TOPICS = [
    "Geography",
    "History",
    "Engineering",
    "Ecology",
    "Education",
    "Transport",
    "Agriculture",
    "Archives",
]


def _sentence(rng: random.Random) -> str:
    parts = [rng.choice(_WORDS[k]) for k in ("subject", "verb", "object", "tail")]
    return " ".join(parts).capitalize() + "."


def _document(rng: random.Random) -> str:
    paragraphs = []
    for _ in range(rng.randint(1, 8)):
        paragraphs.append(" ".join(_sentence(rng) for _ in range(rng.randint(2, 12))))
    return "\n\n".join(paragraphs)


def _html_page(title: str, body: str) -> str:
    paragraphs = "".join(f"<p>{p}</p>" for p in body.split("\n\n"))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
        f"<nav><a href='/'>Home</a> | <a href='/about'>About</a></nav>"
        f"<article><h1>{title}</h1>{paragraphs}</article>"
        f"<footer>Copyright example.org</footer></body></html>"
    )


def make_sample(directory: Path, seed: int = 7) -> list[Path]:
    """Write the demo's own input files into `directory`; returns their paths."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    texts = [_document(rng) for _ in range(240)]

    jsonl = directory / "sample-articles.jsonl"
    with jsonl.open("w", encoding="utf-8") as f:
        for i, text in enumerate(texts[:200]):
            f.write(json.dumps({"id": f"doc-{i}", "text": text, "lang": "en"}) + "\n")
        f.write(json.dumps({"id": "dup", "text": texts[0], "lang": "en"}) + "\n")  # exact dup
        f.write('{"id": "broken", "text": "unterminated\n')  # invalid JSON
        f.write(json.dumps({"id": "no-text", "title": "a record without text"}) + "\n")

    html = directory / "sample-page.html"
    html.write_text(_html_page(rng.choice(_TOPICS), texts[200]), encoding="utf-8")

    warc = directory / "sample-crawl.warc.gz"
    with warc.open("wb") as raw:
        writer = WARCWriter(raw, gzip=True)
        for i, text in enumerate(texts[201:]):
            body = _html_page(f"{rng.choice(_TOPICS)} {i}", text).encode()
            headers = StatusAndHeaders(
                "200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1"
            )
            record = writer.create_warc_record(
                f"https://example.org/page/{i}",
                "response",
                payload=io.BytesIO(body),
                http_headers=headers,
            )
            writer.write_record(record)
    return [jsonl, html, warc]


def _training_texts(paths: list[Path]) -> list[str]:
    texts = []
    for path in paths:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        texts.append(data.decode("utf-8", errors="replace"))
    return texts


def train_tokenizer(paths: list[Path], out: Path, vocab_size: int = 8192) -> Path:
    """Train a byte-level BPE tokenizer (with an <|endoftext|> token) on the files' text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_training_texts(paths), trainer=trainer)
    out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out))
    return out


def run_demo(
    settings: Settings,
    inputs: list[Path],
    tokenizer: Path | None,
    seq_len: int,
    dataset: str,
    *,
    log: Log,
    source: str = "demo",
    license: str = "CC0-1.0",
) -> str:
    """Run the whole platform once; returns the shard set key the trainer can read."""

    if not inputs:
        inputs = make_sample(settings.home / "sample")
        log(f"no input given: generated a sample in {settings.home / 'sample'}")
    if tokenizer is None:
        tokenizer = train_tokenizer(inputs, settings.home / "tokenizers" / "demo-bpe.json")
        log(f"no tokenizer given: trained a byte-level BPE on the inputs -> {tokenizer}")
    info = register_tokenizer(settings, tokenizer, make_default=True)
    log(
        f"tokenizer {info.name} ({info.tokenizer_hash[:12]}, vocab {info.vocab_size}) "
        "is the default"
    )

    manifest, created = land(settings, inputs, source=source, license=license)
    log(
        f"{'landed' if created else 'found'} batch {manifest.batch_id}: {len(manifest.files)} files"
    )
    run_batch(settings, manifest.batch_id, log)
    policy = load_policy(settings, source)
    log(
        f"curated under the {policy.base} policy of source {source!r} "
        f"({'FM_POLICY_FILE' if settings.policy_file else 'no FM_POLICY_FILE: the default'}); "
        f"what it dropped: {drop_summary(settings, [manifest.batch_id])}"
    )
    version_key = create_version(settings, dataset, [], log)
    log(f"created {version_key}")
    shard_set = build_shards(settings, version_key, info.tokenizer_hash, seq_len, log)
    log(f"built shard set {shard_set}")

    ds = fm_loader.make_dataset(
        version_key,
        rank=0,
        world_size=1,
        seq_len=seq_len,
        settings=settings,
        expected_tokenizer_hash=info.tokenizer_hash,
    )
    samples = trained_positions = 0
    for sample in ds:
        samples += 1
        trained_positions += int(sample["loss_mask"].sum())
    log(
        f"read back {samples} samples of {seq_len} tokens through fm_loader.make_dataset "
        f"({trained_positions} positions with a next-token label)"
    )
    return shard_set
