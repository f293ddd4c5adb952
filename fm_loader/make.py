"""`make_dataset`: the trainer's one entry point: resolve, check, and open a set or a mixture."""

from __future__ import annotations

from typing import Any, Unpack

from fm_loader.format.pair_set import PairSetManifest
from fm_loader.options import LoaderKeywords, LoaderOptions, with_keywords
from fm_loader.order.mixture import MixtureArg, MixtureSpec
from fm_loader.samples.packing import OnlineTokenizer
from fm_loader.serving.batches import BatchDataset
from fm_loader.serving.dataset import FmDataset
from fm_loader.serving.online import OnlineDataset
from fm_loader.serving.stream import StreamDataset
from fm_loader.sources.resolve import open_shard_sets, open_text_sets


def make_dataset(
    source: MixtureArg,
    options: LoaderOptions | None = None,
    /,
    **keywords: Unpack[LoaderKeywords],
) -> StreamDataset[Any]:
    """Open a shard set, or a mixture of them, for training and check it before the first step.

    `source`: a dataset version key ("web@v1", resolved through the `shard_sets` catalog table),
    a shard-set directory / file:// / s3:// URI, or a mixture mapping such keys to weights
    ({"web@v3": 0.7, "code@v1": 0.3}) or to `Epochs(k)`. The options come as keywords, or as a
    `LoaderOptions` (keywords given too replace its fields):

    `seq_len` and `tokenizer` (a tokenizer.json path) choose among a version's shard sets and
    must match the one served; `expected_tokenizer_hash` / `expected_schema_fingerprint` pin
    them further. `rank`/`world_size` default to torch.distributed, then RANK/WORLD_SIZE.
    `seed`, `epoch` and `shuffle_window` fix the order. `batch_size` decides which worker
    serves which sample (workers take whole batches in turn, so the trainer receives the rank's
    stream in order): with a plain DataLoader pass its `batch_size` here; with `make_loader`
    give it here or there, once. None (the default) means not chosen: `make_loader` then sets
    its own, and the dataset iterated alone places samples one by one.

    Version keys are looked up in the catalog at `settings` (default: the environment's).
    Remote sets are downloaded once per node into `cache_dir` (default `~/.cache/fm_loader`), in
    a directory named by their manifest's sha256. Raises ValueError, saying what to do, on an
    unknown or ambiguous version, a tokenizer or schema mismatch, an unknown manifest format, a
    remote set that fails its checksums, or sources that cannot be mixed.

    A shard set the platform revoked (`fm revoke`) raises, naming the reason and its replacement,
    unless `allow_revoked=True` (audits). `run_id` names the training run: rank 0 records it beside
    each shard set, with the position consumed at every `state_dict()`, for `fm lineage run`.
    `namespaces` (e.g. {"cloud"}): the data namespaces this job may read; a source holding any
    other raises, naming it.

    `tokenize_online=True` (fine-tunes whose tokenizer is the experiment): serve each version's
    curated text (its text set, `fm text export DATASET@vN`) tokenized here with `tokenizer`
    and packed on the fly into `seq_len` samples, `docs_per_pack` documents at a time; see
    `fm_loader.serving.online`. The same exactly-once, elastic, resumable contract, with a
    state that pins the tokenizer's hash. The result is then an `OnlineDataset`, else an
    `FmDataset`.
    """
    spec = MixtureSpec.parse(source)
    options = with_keywords(options, dict(keywords))
    options.placement()  # an impossible rank or world size fails before any set is opened
    if options.tokenize_online:
        if options.tokenizer is None:
            raise ValueError("make_dataset(tokenize_online=True) needs tokenizer=PATH")
        texts = open_text_sets(spec.keys, options)
        return OnlineDataset(texts, spec, OnlineTokenizer.from_file(options.tokenizer), options)
    opened = open_shard_sets(spec.keys, options)
    if any(isinstance(r.manifest, PairSetManifest) for r in opened):
        # Image-text: served a batch at a time, each batch's images of one aspect bucket.
        return BatchDataset(opened, spec, options)
    dataset = FmDataset(opened, spec, options)
    if options.run_id is not None:
        dataset.record_run(options.run_id)
    return dataset
