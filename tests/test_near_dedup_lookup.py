"""The near-dup index is laid out by key (`execution/near_dedup/layout.py`) and read by key
(`lookup.py` over `storage/keyed/reads.py`, `index_reads.py`): a lookup returns exactly the
rows holding its keys, from files of the layout and from files an older platform wrote alike,
and reads only the row groups that hold them; the Bloom filters it reads 32 bytes at a time
are the ones Parquet wrote.

Synthetic rows, written with the stage's own writer into a fresh FM_HOME's catalog.
"""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import xxhash

from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
from fm_assets.execution.near_dedup import layout, lookup
from fm_assets.execution.near_dedup.index_reads import (
    indexed_elsewhere,
    other_batches_rows,
    stored_shingles,
)
from fm_assets.execution.near_dedup.tasks import BAND_ROWS
from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files
from fm_assets.storage.keyed import bloom

NS = "cloud"
BANDS = 14


def _rows(rng: np.random.Generator, batch_id: str, docs: int) -> tuple[pa.Table, pa.Table]:
    """A batch's band rows and shingle-set rows, as the stage writes them."""
    ids = [f"{x:016x}-{batch_id}" for x in rng.integers(0, 2**62, docs)]
    hashes = rng.integers(-(2**63), 2**63 - 1, (docs, BANDS), dtype=np.int64)
    bands = pa.table(
        {
            "batch_id": [batch_id] * (docs * BANDS),
            "doc_id": np.repeat(np.array(ids, dtype=object), BANDS).tolist(),
            "band": pa.array(np.tile(np.arange(BANDS, dtype=np.int32), docs)),
            "band_hash": hashes.reshape(-1),
            "shingle_hashes": pa.nulls(docs * BANDS, pa.list_(pa.int64())),
            "index_config": ["test"] * (docs * BANDS),
        }
    )
    sets = pa.table(
        {
            "batch_id": [batch_id] * docs,
            "doc_id": ids,
            "band": pa.array([-1 - int(d[8:16], 16) % 16 for d in ids], pa.int32()),
            "band_hash": np.zeros(docs, np.int64),
            "shingle_hashes": [sorted(rng.integers(0, 2**62, 30).tolist()) for _ in ids],
            "index_config": ["test"] * docs,
        }
    )
    return bands, sets


def _commit(settings: Settings, files: list[object]) -> None:
    data_files.commit_files(settings, "neardup_index", catalog.NOTHING, files, {}, NS)  # type: ignore[arg-type]


def _index(settings: Settings, batches: int, docs: int) -> tuple[pa.Table, pa.Table]:
    """Commit `batches` runs of the layout and one file as an older platform wrote it (both
    kinds of row in one file, sorted by band, no filters); return all band and set rows."""
    rng = np.random.default_rng(5)
    handle = data_files.table_handle(settings, "neardup_index", NS)
    all_bands, all_sets = [], []
    for b in range(batches):
        bands, sets = _rows(rng, f"b{b}", docs)
        write_id = uuid.uuid4()
        _commit(
            settings,
            layout.write_index_files(handle, bands, layout.BANDS, write_id, 0)
            + layout.write_index_files(handle, sets, layout.SETS, write_id, 0),
        )
        all_bands.append(bands)
        all_sets.append(sets)
    bands, sets = _rows(rng, "old", docs)
    old = pa.concat_tables([sets, bands]).sort_by([("band", "ascending")])
    _commit(settings, data_files.write_files(handle, old, uuid.uuid4(), 0))
    return pa.concat_tables([*all_bands, bands]), pa.concat_tables([*all_sets, sets])


def test_filter_hashes_are_xxh64_of_the_values_parquet_encodes() -> None:
    values = np.array([0, 1, -1, 2**63 - 1, -(2**63), 123456789], dtype=np.int64)
    expected = [xxhash.xxh64_intdigest(int(v).to_bytes(8, "little", signed=True)) for v in values]
    assert bloom.hash_int64(values).tolist() == expected
    assert bloom.hash_strings(["", "doc-é"]).tolist() == [
        xxhash.xxh64_intdigest(b""),
        xxhash.xxh64_intdigest("doc-é".encode()),
    ]


def test_every_written_key_passes_its_filter_and_almost_no_absent_key_does(
    fm_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layout, "BAND_GROUP_ROWS", 500)
    rng = np.random.default_rng(3)
    bands, _ = _rows(rng, "b0", 200)
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    (written,) = layout.write_index_files(handle, bands, layout.BANDS, uuid.uuid4(), 0)
    path = written.file_path.removeprefix("file://")
    metadata = pq.read_metadata(path)
    assert metadata.num_row_groups == 6  # 2,800 rows, 500 a group
    absent = rng.integers(-(2**63), 2**63 - 1, 20_000, dtype=np.int64)
    passed = 0
    with open(path, "rb") as f, pa.OSFile(path) as file:
        table = pq.ParquetFile(f).read()
        for group in range(metadata.num_row_groups):
            chunk = metadata.row_group(group).column(3)  # band_hash
            assert chunk.path_in_schema == "band_hash"
            header = file.read_at(64, chunk.bloom_filter_offset)
            found = bloom.parse_header(header, chunk.bloom_filter_length, chunk.bloom_filter_offset)
            assert found is not None
            keys = table.column("band_hash").to_numpy()[group * 500 : (group + 1) * 500]
            for values in (keys, absent):
                hashes = bloom.hash_int64(values)
                blocks = found.block_of(hashes)
                offsets = found.offset + blocks * bloom.BLOCK_BYTES
                wanted = np.unique(offsets)
                words = bloom.read_blocks_at(file, wanted)[np.searchsorted(wanted, offsets)]
                maybe = bloom.may_contain(words, hashes)
                if values is keys:
                    assert maybe.all()
                else:
                    passed += int(maybe.sum())
    assert passed <= 0.01 * len(absent) * metadata.num_row_groups, passed


@pytest.mark.parametrize("kind", [layout.BANDS, layout.SETS])
def test_a_lookup_returns_exactly_the_rows_of_its_keys(fm_settings: Settings, kind: str) -> None:
    bands, sets = _index(fm_settings, batches=3, docs=300)
    rows = bands if kind == layout.BANDS else sets
    key = layout.KEY[kind]
    rng = np.random.default_rng(9)
    present = rows.column(key).take(pa.array(rng.integers(0, rows.num_rows, 40)))
    absent = (
        pa.array(rng.integers(-(2**63), 2**63 - 1, 400, dtype=np.int64))
        if kind == layout.BANDS
        else pa.array([f"absent-{i}" for i in range(400)])
    )
    keys = pa.concat_arrays([present.combine_chunks(), absent])
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    files = data_files.plan_handle(handle)
    counts = lookup.ReadCounts()
    asked = tuple(dict.fromkeys(["doc_id", "band", key]))
    got = lookup.key_rows(handle, files, kind, keys, asked, counts)
    # Every row of those keys, from the layout's files and the older one alike. The older file
    # is of no known kind: a document id finds its band rows there too (callers filter).
    columns = list(dict.fromkeys(["batch_id", "doc_id", "band", key]))
    everything = pa.concat_tables([bands.select(columns), sets.select(columns)])
    wanted = everything.filter(pc.is_in(everything.column(key), value_set=keys))
    if kind == layout.SETS:
        of_kind = pc.or_(pc.less(wanted.column("band"), 0), pc.equal(wanted["batch_id"], "old"))
        wanted = wanted.filter(of_kind)
    wanted = wanted.select(list(dict.fromkeys(["doc_id", "band", key])))
    assert sorted(got.to_pylist(), key=repr) == sorted(wanted.to_pylist(), key=repr)
    assert wanted.num_rows >= 40
    assert counts.files >= 1


def test_a_lookup_reads_the_row_groups_of_its_keys_and_a_footer_once(
    fm_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layout, "BAND_GROUP_ROWS", 64)
    rng = np.random.default_rng(11)
    bands, _ = _rows(rng, "b0", 2_000)  # 28,000 rows: 438 row groups in one file
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    _commit(fm_settings, layout.write_index_files(handle, bands, layout.BANDS, uuid.uuid4(), 0))
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    files = data_files.plan_handle(handle)
    present = bands.column("band_hash").take(pa.array([5, 17_000, 27_999]))
    absent = pa.array(rng.integers(-(2**63), 2**63 - 1, 2_000, dtype=np.int64))
    keys = pa.concat_arrays([present.combine_chunks(), absent])
    lookup.clear_footer_cache()
    first, again = lookup.ReadCounts(), lookup.ReadCounts()
    found = lookup.key_rows(handle, files, layout.BANDS, keys, ("band_hash",), first)
    assert sorted(found.column("band_hash").to_pylist()) == sorted(present.to_pylist())
    # Three row groups hold the keys; an absent key reaches a row group only when its filter
    # answers "maybe" (about 0.2% of them).
    assert 3 <= first.row_groups <= 12, first
    assert first.footers == 1 and first.filter_blocks <= len(keys)
    lookup.key_rows(handle, files, layout.BANDS, keys, ("band_hash",), again)
    assert again.footers == 0 and again.footer_bytes == 0  # the footer was kept
    assert again.row_groups == first.row_groups


def test_a_key_whose_rows_span_row_groups_is_found_in_each(
    fm_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layout, "BAND_GROUP_ROWS", 64)
    bands, _ = _rows(np.random.default_rng(12), "b0", 100)  # 1,400 rows, 22 row groups
    hashes = bands.column("band_hash").to_numpy().copy()
    shared = int(hashes[0])
    hashes[:300] = shared  # one band hash on 300 rows: at least five row groups once sorted
    where = bands.schema.get_field_index("band_hash")
    bands = bands.set_column(where, "band_hash", pa.array(hashes))
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    _commit(fm_settings, layout.write_index_files(handle, bands, layout.BANDS, uuid.uuid4(), 0))
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    counts = lookup.ReadCounts()
    keys = pa.array([shared], pa.int64())
    found = lookup.key_rows(
        handle, data_files.plan_handle(handle), layout.BANDS, keys, ("doc_id", "band_hash"), counts
    )
    assert sorted(found.column("doc_id").to_pylist()) == sorted(
        bands.column("doc_id").to_pylist()[:300]
    )
    assert counts.row_groups >= 5


def _band_tables(rows: list[tuple[int, int, str]]) -> list[pa.Table]:
    """The batch's band tables, one per band: (band, band_hash, doc_id) rows."""
    return [
        pa.Table.from_pylist(
            [
                {"band_hash": h, "pos": i, "doc_id": d}
                for i, (b, h, d) in enumerate(rows)
                if b == band
            ],
            BAND_ROWS,
        )
        for band in range(BANDS)
    ]


def test_a_task_reads_rows_sharing_its_hashes_in_its_bands_from_other_batches(
    fm_settings: Settings,
) -> None:
    bands, sets = _index(fm_settings, batches=3, docs=200)
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    files = data_files.plan_handle(handle)
    b0 = bands.filter(pc.equal(bands.column("batch_id"), "b0")).to_pylist()
    b1 = bands.filter(pc.equal(bands.column("batch_id"), "b1")).to_pylist()
    a, c = b0[30], b1[50]  # a row of band a["band"], one of band c["band"]
    batch = _band_tables(
        [
            (a["band"], a["band_hash"], "new-doc-a"),  # shares b0's hash in the same band
            ((c["band"] + 1) % BANDS, c["band_hash"], "new-doc-c"),  # b1's hash, another band
            (a["band"], 42, "new-doc-d"),  # shares nothing
        ]
    )
    task_bands = sorted({a["band"], (c["band"] + 1) % BANDS})
    found = other_batches_rows(handle, files, task_bands, "new", batch)
    assert found.schema.names == ["doc_id", "band", "band_hash", "batch_id"]
    assert found.to_pylist() == [
        {"doc_id": a["doc_id"], "band": a["band"], "band_hash": a["band_hash"], "batch_id": "b0"}
    ]
    # A rerun of b0 never finds its own rows.
    assert other_batches_rows(handle, files, task_bands, "b0", batch).num_rows == 0

    ids = sets.column("doc_id").to_pylist()
    old_ids = [d for d in ids if d.endswith("-old")]
    asked = [ids[0], ids[250], old_ids[0], "never-indexed"]
    assert indexed_elsewhere(handle, files, asked, "b0") == {ids[250], old_ids[0]}
    stored = stored_shingles(handle, files, asked)
    by_id = {r["doc_id"]: r["shingle_hashes"] for r in sets.to_pylist()}
    assert {d: v.view(np.int64).tolist() for d, v in stored.items()} == {
        d: by_id[d] for d in asked[:3]
    }


def test_a_batch_without_shingled_documents_reads_no_index_file(
    fm_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _index(fm_settings, batches=1, docs=10)
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    counts = lookup.ReadCounts()
    found = other_batches_rows(
        handle, data_files.plan_handle(handle), [0, 1], "new", _band_tables([]), counts
    )
    assert found.num_rows == 0 and counts == lookup.ReadCounts()
    assert found.schema.names == ["doc_id", "band", "band_hash", "batch_id"]
