"""Image-text pairs end to end, through the same commands and Dagster assets as text: land a
WebDataset tar and an img2dataset Parquet file (real photos from scikit-image, every edge case
Pillow makes, planted duplicates), run each batch, cut a version.

One FM_HOME for the module: the second batch is deduplicated against the first one's index.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import imagehash
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

from fm_assets.commands import operations
from fm_assets.commands.cli import main
from fm_assets.curation.images.hashing import phash_hex
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.shards.build import read_shard_set_row
from fm_assets.storage import catalog
from fm_assets.storage.landing import read_manifest as read_landing_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import require_version
from fm_assets.versions.reader import version_documents
from fm_loader import make_dataset, make_loader
from fm_loader.format.manifest import read_manifest
from tests.image_data import (
    PHOTOS,
    Sample,
    edge_cases,
    encode,
    near_duplicates,
    photo,
    photo_samples,
    write_parquet,
    write_webdataset,
)
from tests.paths import NEOX_TOKENIZER

pytestmark = pytest.mark.slow

NEOX_EOS = 50279  # <|endoftext|> of the GPT-NeoX tokenizer: every caption ends with it
TAR_PHOTOS = PHOTOS[:10]
PARQUET_PHOTOS = PHOTOS[10:]
EDGE_QUARANTINE = {
    "truncated": "truncated_image",
    "zero_byte": "zero_byte_image",
    "not_an_image": "not_an_image",
    "wrong_extension": "wrong_extension",
    "bomb": "decompression_bomb",
}


@dataclass
class Landed:
    settings: Settings
    tar_batch: str
    parquet_batch: str
    tar_keys: dict[str, str]  # sample key -> what it is


def _rules(settings: Settings, batch_id: str) -> Counter[str]:
    rows = catalog.read_table(
        settings, "quarantine", catalog.where_equal("batch_id", batch_id), namespace="cloud"
    )
    return Counter(
        zip(rows.column("stage").to_pylist(), rows.column("rule").to_pylist(), strict=True)
    )


@pytest.fixture(scope="module")
def landed(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Landed]:
    root = tmp_path_factory.mktemp("image-text")
    home = root / "fm"
    saved = {k: os.environ.get(k) for k in ("FM_HOME", "DAGSTER_HOME")}
    os.environ["FM_HOME"], os.environ["DAGSTER_HOME"] = str(home), str(home / "dagster")
    settings = load_settings()
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)

    samples = photo_samples(TAR_PHOTOS)
    keys = {s.key: "photo" for s in samples}
    astronaut = photo("astronaut")
    for name, (data, extension) in edge_cases(photo("coins")).items():
        key = f"edge-{name}"
        keys[key] = name
        samples.append(Sample(key, data, extension, f"An old photograph of coins: {name}"))
    samples += [
        # The same bytes and caption again: an exact duplicate of the landed pair.
        Sample("dup-exact", samples[0].image, caption=samples[0].caption),
        # The same picture, recompressed: other bytes, a near-duplicate image.
        Sample(
            "dup-jpeg",
            encode(near_duplicates(astronaut)["jpeg_q40"]),
            caption="Astronaut portrait again from the same official photo session",
        ),
        Sample(
            "tiny",
            encode(astronaut.resize((120, 120))),
            caption="A small astronaut icon picture for the website header",
        ),
        Sample(
            "boilerplate", encode(photo("rocket").crop((0, 0, 300, 300))), caption="IMG_4032.JPG"
        ),
    ]
    keys.update({"dup-exact": "exact", "dup-jpeg": "near", "tiny": "small", "boilerplate": "alt"})
    tar = write_webdataset(root / "00000.tar", samples)
    # The Parquet batch holds new photos, a failed download and a resized copy of a photo the
    # tar landed first: a near-duplicate across batches.
    rows = photo_samples(PARQUET_PHOTOS, prefix="p")
    rows.append(Sample("p-failed", None, caption="a picture that never downloaded"))
    rows.append(
        Sample(
            "p-resized",
            encode(near_duplicates(photo("coffee"))["resized"]),
            caption="A cup of coffee with a leaf drawn in the milk foam",
        )
    )
    parquet = write_parquet(root / "00000.parquet", rows)

    runner = CliRunner()
    tar_batch = runner.invoke(main, ["land", str(tar), "--source", "pairs", "--license", "CC0-1.0"])
    assert tar_batch.exit_code == 0, tar_batch.output
    parquet_batch = runner.invoke(
        main, ["land", str(parquet), "--source", "pairs", "--license", "CC0-1.0"]
    )
    assert parquet_batch.exit_code == 0, parquet_batch.output
    result = Landed(settings, tar_batch.stdout.split()[-1], parquet_batch.stdout.split()[-1], keys)
    for batch in (result.tar_batch, result.parquet_batch):
        operations.run_batch(settings, batch, lambda message: None)  # raises if a check fails
    yield result
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def test_the_batch_records_its_modality(landed: Landed) -> None:
    out = CliRunner().invoke(main, ["status"])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.stdout.splitlines() if landed.tar_batch in x)
    assert "image-text" in line and "pairs tokenized" in line


def test_every_sample_is_kept_or_quarantined_for_its_own_reason(landed: Landed) -> None:
    s = landed.settings
    rules = _rules(s, landed.tar_batch)
    for name, rule in EDGE_QUARANTINE.items():
        assert rules[("decoded_pairs", rule)] >= 1, (name, rules)
    assert rules[("raw_pairs", "exact_duplicate")] == 1
    assert rules[("filtered_pairs", "image_too_small")] == 1
    assert rules[("filtered_pairs", "boilerplate_caption")] == 1
    # The astronaut's JPEG copy, and every coin edge case Pillow decodes (CMYK, 16-bit, palette,
    # EXIF-rotated, animated, ...): each repeats the coins photo, decoded upright to RGB.
    near = rules[("deduplicated_pairs", "near_duplicate_image")]
    exact_pixels = rules[("deduplicated_pairs", "exact_duplicate_image")]
    assert near + exact_pixels == 1 + 8
    kept = catalog.read_batch(s, "tokenized_pairs", landed.tar_batch)
    kept_keys = set(kept.column("external_id").to_pylist())
    assert {k for k, what in landed.tar_keys.items() if what == "photo"} <= kept_keys
    assert not any(k.startswith("edge-") for k in kept_keys)
    assert not kept_keys & {"dup-exact", "dup-jpeg", "tiny", "boilerplate"}
    total = len(landed.tar_keys)
    assert kept.num_rows + sum(rules.values()) == total  # nothing lost


def test_decoded_images_are_normalized_resized_and_hashed(landed: Landed) -> None:
    kept = catalog.read_batch(landed.settings, "tokenized_pairs", landed.tar_batch)
    for row in kept.to_pylist():
        image = Image.open(io.BytesIO(row["image"]))
        assert image.format == "JPEG" and image.mode == "RGB"
        assert image.size == (row["width"], row["height"]) and max(image.size) <= 512
        assert row["original_width"] >= row["width"] and row["num_tokens"] >= 2
        assert row["language"] == "en" and row["tokens"][-1] == NEOX_EOS
    coffee = next(r for r in kept.to_pylist() if r["text"].startswith("A cup of coffee"))
    assert (coffee["original_width"], coffee["original_height"]) == (600, 400)
    assert (coffee["width"], coffee["height"]) == (512, 341)
    raw = catalog.read_batch(landed.settings, "raw_pairs", landed.tar_batch)
    landed_bytes = raw.filter(pc.equal(raw.column("doc_id"), coffee["doc_id"]))["raw_content"]
    decoded = Image.open(io.BytesIO(landed_bytes[0].as_py())).convert("RGB")
    assert phash_hex(coffee["phash"]) == str(imagehash.phash(decoded))


def test_the_second_batch_is_deduplicated_against_the_first(landed: Landed) -> None:
    s = landed.settings
    rules = _rules(s, landed.parquet_batch)
    assert rules[("raw_pairs", "failed_download")] == 1
    assert rules[("deduplicated_pairs", "near_duplicate_image")] == 1
    reason = (
        catalog.read_table(
            s,
            "quarantine",
            catalog.where_all(
                catalog.where_equal("batch_id", landed.parquet_batch),
                catalog.where_equal("rule", "near_duplicate_image"),
            ),
            namespace="cloud",
        )
        .column("reason")[0]
        .as_py()
    )
    assert f"(batch {landed.tar_batch})" in reason
    kept = catalog.read_batch(s, "tokenized_pairs", landed.parquet_batch)
    assert kept.num_rows == len(PARQUET_PHOTOS)
    raw = catalog.read_batch(s, "raw_pairs", landed.parquet_batch)
    rows = raw.filter(pc.is_in(raw.column("doc_id"), kept.column("doc_id")))
    assert sorted(rows.column("record_line").to_pylist()) == list(range(len(PARQUET_PHOTOS)))


def test_the_sensor_requests_the_image_text_job(landed: Landed) -> None:
    from fm_assets.definitions import defs

    with dg.instance_for_test() as instance:
        sensor = defs.resolve_sensor_def("new_landing_batch_sensor")
        context = dg.build_sensor_context(instance=instance, resources={"fm": defs.resources["fm"]})
        result = sensor(context)
    jobs = {r.partition_key: r.job_name for r in result.run_requests or []}  # type: ignore[union-attr]
    assert jobs == {
        landed.tar_batch: "process_image_text_batch",
        landed.parquet_batch: "process_image_text_batch",
    }


@pytest.fixture(scope="module")
def version_key(landed: Landed) -> str:
    """pairs@v1, cut over both batches with the CLI."""
    out = CliRunner().invoke(main, ["version", "create", "pairs", "--modality", "image-text"])
    assert out.exit_code == 0, out.output
    return out.stdout.split()[-1]


@pytest.fixture(scope="module")
def shard_set_key(landed: Landed, version_key: str) -> str:
    """pairs@v1's image-text shard set, built with the CLI (its checks must pass)."""
    out = CliRunner().invoke(
        main,
        ["shards", "build", version_key, "--tokenizer", str(NEOX_TOKENIZER), "--seq-len", "32"],
    )
    assert out.exit_code == 0, out.output
    return out.stdout.split()[-1]


def test_a_version_of_pairs_holds_the_kept_pairs_of_both_batches(
    landed: Landed, version_key: str
) -> None:
    s = landed.settings
    version = require_version(s, version_key)
    assert version.modality == "image-text"
    assert set(version.batches) == {landed.tar_batch, landed.parquet_batch}
    docs = version_documents(s, version, "tokenized_pairs", ("doc_id", "num_tokens"))
    assert (
        version.num_documents
        == docs.num_rows
        == (
            catalog.read_batch(s, "tokenized_pairs", landed.tar_batch).num_rows
            + catalog.read_batch(s, "tokenized_pairs", landed.parquet_batch).num_rows
        )
    )


def test_a_batch_mixing_modalities_is_refused(landed: Landed, tmp_path: Path) -> None:
    tar = write_webdataset(tmp_path / "x.tar", photo_samples(("moon",)))
    text = tmp_path / "notes.jsonl"
    text.write_text('{"text": "a note"}\n')
    out = CliRunner().invoke(
        main, ["land", str(tar), str(text), "--source", "mixed", "--license", "CC0-1.0"]
    )
    assert out.exit_code != 0
    assert "mix modalities" in out.output and "x.tar" in out.output and "notes.jsonl" in out.output
    wrong = CliRunner().invoke(
        main,
        ["land", str(text), "--source", "x", "--license", "CC0-1.0", "--modality", "image-text"],
    )
    assert wrong.exit_code != 0 and "notes.jsonl" in wrong.output


def test_the_card_shows_the_images_kept_and_dropped(landed: Landed, version_key: str) -> None:
    from fm_assets.storage.objectstore import open_object_store

    s = landed.settings
    store = open_object_store(s)
    (key,) = [r["version_key"] for r in catalog.read_table(s, "dataset_versions").to_pylist()]
    card = store.read_bytes(f"cards/{key}/dataset_card.md").decode()
    assert "## Images" in card and "| 1:1 |" in card
    for name in (
        "kept_images.png",
        "dropped_truncated_image.png",
        "dropped_near_duplicate_image.png",
    ):
        assert f"]({name})" in card
        sheet = Image.open(io.BytesIO(store.read_bytes(f"cards/{key}/{name}")))
        assert sheet.format == "PNG" and sheet.width >= 160 and sheet.height >= 200
    # The kept sheet shows real pictures: most of its pixels are not the white background.
    kept = Image.open(io.BytesIO(store.read_bytes(f"cards/{key}/kept_images.png"))).convert("L")
    histogram = kept.histogram()
    assert sum(histogram[:250]) > 0.5 * sum(histogram)
    assert "exact_duplicate_image" in card or "near_duplicate_image" in card
    assert "| Near duplicates | pHash within 8 bits |" in card


def test_a_trainer_reads_the_version_in_batches_of_one_bucket(
    landed: Landed, version_key: str, shard_set_key: str
) -> None:
    s = landed.settings
    docs = set(
        version_documents(s, require_version(s, version_key), "tokenized_pairs", ("doc_id",))
        .column("doc_id")
        .to_pylist()
    )
    dataset = make_dataset(
        version_key, rank=0, world_size=1, batch_size=4, settings=s, image_size=64
    )
    batches = list(make_loader(dataset, num_workers=2))
    assert sorted(d for b in batches for d in b["doc_id"]) == sorted(docs)
    for batch in batches:
        assert len(set(batch["bucket"].tolist())) == 1
        assert batch["pixel_values"].shape[0] == len(batch["doc_id"])
        assert all(Image.open(io.BytesIO(b)).format == "JPEG" for b in batch["image"])
        assert (batch["input_ids"][:, 0] != 0).all()  # captions, not padding
    manifest = read_manifest(
        Path(str(read_shard_set_row(s, shard_set_key)["uri"]).removeprefix("file://"))
    )
    assert sum(b.samples for b in manifest.buckets) == len(docs)


def test_a_sample_leads_back_to_its_tar_member_and_raw_bytes(
    landed: Landed, shard_set_key: str
) -> None:
    out = CliRunner().invoke(main, ["lineage", "sample", shard_set_key, "0"])
    assert out.exit_code == 0, out.output
    (origin,) = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    store = open_object_store(landed.settings)
    manifest = read_landing_manifest(store, origin["batch_id"])
    landed_file = next(f for f in manifest.files if f.name == origin["source_file"])
    raw = store.read_bytes(landed_file.key)
    if origin["source_file"].endswith(".tar"):
        with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
            member = archive.getmember(origin["image_member"])
            assert member.offset == origin["record_offset"]
            image = archive.extractfile(member).read()  # type: ignore[union-attr]
    else:
        row = pq.read_table(io.BytesIO(raw)).slice(origin["record_line"], 1).to_pylist()[0]
        image = row[origin["image_member"]]
    assert hashlib.sha256(image).hexdigest() == origin["raw_sha256"]
    assert origin["version"] == shard_set_key.split("/")[0]


def test_revoking_a_pair_removes_it_from_the_next_version_and_its_shards(
    landed: Landed, version_key: str, shard_set_key: str
) -> None:
    s = landed.settings
    v1 = require_version(s, version_key)
    pairs = version_documents(s, v1, "tokenized_pairs", ("doc_id", "raw_sha256"))
    revoked = pairs.column("doc_id")[0].as_py()
    image_sha = pairs.column("raw_sha256")[0].as_py()
    # Revoked by the image's bytes: every pair landed with that image goes.
    holding = set(
        pairs.filter(pc.equal(pairs.column("raw_sha256"), image_sha))["doc_id"].to_pylist()
    )
    assert revoked in holding
    out = CliRunner().invoke(
        main, ["revoke", "--raw-sha256", image_sha, "--reason", "photographer asked"]
    )
    assert out.exit_code == 0, out.output
    line = next((x for x in out.stdout.splitlines() if x.startswith("shard_set ")), out.output)
    assert "-> " in line, out.output
    new_key = line.split("-> ")[1].split()[0]
    with pytest.raises(ValueError, match="revoked: photographer asked"):
        make_dataset(version_key, rank=0, world_size=1, batch_size=4, settings=s)
    served = make_dataset(new_key.split("/")[0], rank=0, world_size=1, batch_size=4, settings=s)
    ids = {d for b in make_loader(served) for d in b["doc_id"]}
    assert revoked not in ids and ids == set(pairs.column("doc_id").to_pylist()) - holding


def test_a_job_confined_to_another_namespace_is_refused(
    landed: Landed, version_key: str, shard_set_key: str
) -> None:
    with pytest.raises(ValueError, match="cloud"):
        make_dataset(
            version_key,
            rank=0,
            world_size=1,
            batch_size=4,
            settings=landed.settings,
            namespaces={"on-device"},
            allow_revoked=True,
        )
