"""A stage on a Ray cluster plans its slices from its data's size, not from the CPUs present when
it starts, and sends more tasks as the cluster grows: a node that joins mid-stage gets work."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fm_assets.execution.compute import plan_width
from fm_assets.execution.planning import slice_count
from fm_assets.settings import load_settings
from fm_assets.storage.landing import land_files
from fm_assets.storage.objectstore import open_object_store
from tests.paths import REPO, SHARED_DATA
from tests.services.ray_cluster import RayCluster, joined_node

MIB = 1 << 20
SLICE_BYTES = 256 << 10


def test_a_cluster_plans_from_the_data_not_the_cpus_present() -> None:
    gib = 1 << 30
    # 1 GiB at 16 MiB a slice: planned for 64 CPUs whether 4 or 64 are there at the start.
    assert plan_width(gib, 4, 16 * MIB) == plan_width(gib, 64, 16 * MIB) == 64
    for per_cpu in (1, 4):
        on_one_node = slice_count(gib, plan_width(gib, 4, 16 * MIB), per_cpu=per_cpu)
        on_sixteen = slice_count(gib, plan_width(gib, 64, 16 * MIB), per_cpu=per_cpu)
        assert on_one_node == on_sixteen == 64 * per_cpu  # 16 MiB slices, 4 MiB for heavy stages
    # A cluster bigger than its data needs still gets every CPU busy.
    assert plan_width(gib, 128, 16 * MIB) == 128
    # The local Ray (no slice size: no node joins it) plans for the CPUs it has.
    assert plan_width(gib, 2, None) == 2
    assert slice_count(gib, plan_width(gib, 2, None), per_cpu=1) == 16  # 64 MiB at most


# The driver: a batch's raw stage, then its extraction, on the cluster. At the extraction's first
# finished task it says JOIN and waits for a line on stdin (the test joins a node meanwhile). A
# node new to a job takes seconds to start workers for it (imports: trafilatura, the stages),
# while this small batch's tasks take a fraction of a second: so the driver first warms two
# workers on the new node, as the minutes a real stage runs would.
DRIVER = """
import dataclasses, json, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from fm_assets.execution.runner import run_stage
from fm_assets.settings import load_settings

STAGE = "extracted_documents"
asked = False


@ray.remote(num_cpus=1)
def warm():
    import fm_assets.execution.slice_tasks, fm_assets.stages.extract  # the stage's imports

    return ray.get_runtime_context().get_node_id()


def progress(line):
    global asked
    print("progress", line, flush=True)
    if asked or not (line.startswith(STAGE + ": ") and " done" in line):
        return
    asked = True
    before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    print("JOIN", flush=True)
    sys.stdin.readline()
    (joined,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in before]
    on_it = NodeAffinitySchedulingStrategy(joined, soft=False)
    ray.get([warm.options(scheduling_strategy=on_it).remote() for _ in range(2)])


settings = load_settings()
run_stage(settings, "raw_documents", sys.argv[1], progress=print)
report = run_stage(settings, STAGE, sys.argv[1], progress=progress)
print("REPORT", json.dumps(dataclasses.asdict(report)), flush=True)
"""
PAGES = SHARED_DATA / "extraction" / "article-extraction-benchmark" / "html"


def _crawl(directory: Path, files: int) -> tuple[list[Path], int]:
    """The benchmark's real article pages as JSONL files of `html` records; and how many."""
    pages = sorted(PAGES.glob("*.html.gz"))
    directory.mkdir(parents=True)
    paths = [directory / f"part-{f:02d}.jsonl" for f in range(files)]
    for i, page in enumerate(pages):
        html = gzip.decompress(page.read_bytes()).decode("utf-8", errors="replace")
        record = {"id": page.name.split(".")[0], "url": f"https://example.org/{i}", "html": html}
        with paths[i % files].open("a") as out:
            out.write(json.dumps(record) + "\n")
    return paths, len(pages)


@pytest.mark.slow
def test_a_node_that_joins_mid_stage_runs_its_tasks(
    ray_cluster_session: RayCluster, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        **ray_cluster_session.driver_env(),
        "FM_HOME": str(tmp_path / "fm"),
        # Small slices: the benchmark's pages (7 MB of extraction input) make some 30 tasks.
        "FM_SLICE_BYTES": str(SLICE_BYTES),
    }
    for name in ("DAGSTER_HOME", "FM_CATALOG_URI", "FM_OBJECT_STORE", "FM_WAREHOUSE"):
        env.pop(name, None)
    settings = load_settings(env)
    files, pages = _crawl(tmp_path / "crawl", files=12)
    manifest, _ = land_files(open_object_store(settings), files, source="growth", license="CC0-1.0")
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, manifest.batch_id],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    report: dict[str, object] = {}
    try:
        assert driver.stdout is not None and driver.stdin is not None
        for line in driver.stdout:
            said.append(line.rstrip())
            if line.startswith("JOIN"):
                break
        else:
            raise AssertionError("the stage ended before its first task:\n" + "\n".join(said))
        # Mid-stage, the cluster grows from two one-CPU nodes to three nodes, five CPUs.
        with joined_node(ray_cluster_session, cpus=3):
            driver.stdin.write("\n")
            driver.stdin.flush()
            for line in driver.stdout:
                said.append(line.rstrip())
                if line.startswith("REPORT "):
                    report = json.loads(line.removeprefix("REPORT "))
            assert driver.wait(timeout=300) == 0, "\n".join(said)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert report, "\n".join(said)
    # Planned from the data at FM_SLICE_BYTES a slice (a quarter of that for this stage of four
    # slices per CPU), not four slices for each of the two CPUs present at the start.
    data = int(report["bytes_in"])  # type: ignore[call-overload]
    assert report["slices"] == slice_count(data, -(-data // SLICE_BYTES), per_cpu=4) > 2 * 4
    # Every node ran slices of the stage, the one that joined mid-stage too.
    assert report["nodes"] == 3, "\n".join(said)
    assert report["records_in"] == pages
    assert report["records_kept"] + report["records_quarantined"] == pages  # type: ignore[operator]
