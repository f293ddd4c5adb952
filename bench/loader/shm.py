"""4. /dev/shm entries (and /tmp lock files) left by ours and by upstream, each in a child
process that exits normally or is SIGKILLed, and by upstream in this long-lived process.

The child is this module run on its own: `python -m bench.loader.shm WHICH HOW`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from bench.harness import REPO
from bench.loader import upstream
from bench.loader.readers import BATCH, SEED, batch_len, one, take
from bench.loader.sets import THROUGHPUT
from bench.loader.upstream import quiet_upstream, streaming_filelocks
from fm_loader import make_dataset, make_loader


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm"))


def streaming_names(entries: set[str]) -> list[str]:
    """The entries named like StreamingDataset's blocks: <6-digit prefix>_<block name>."""
    from streaming.base.constant import SHM_TO_CLEAN

    return sorted(e for e in entries if e[:6].isdigit() and e[7:] in SHM_TO_CLEAN)


def shm_child(which: str, how: str) -> None:
    """Run in a child process: read like a trainer, drop the loader, report /dev/shm, then
    exit normally (`exit`) or wait to be SIGKILLed by the parent (`kill`: a crash, an OOM kill,
    a preempted job)."""
    before = shm_entries()
    if which == "ours":
        ds = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED)
        take(iter(ds), 2000, one)
        batches = iter(make_loader(ds, batch_size=BATCH, num_workers=2))
        take(batches, 2000, batch_len)
        during = shm_entries()
        del batches, ds
    else:
        quiet_upstream()
        from streaming import StreamingDataset

        ds = StreamingDataset(local=str(THROUGHPUT.directory), shuffle=True, batch_size=BATCH)
        samples = iter(ds)
        take(samples, 2000, one)
        during = shm_entries()
        del samples, ds  # what a user does: upstream has no public close
    gc.collect()
    after_del = shm_entries()
    report = {"while_alive": sorted(during - before), "after_del": sorted(after_del - before)}
    print(json.dumps(report), flush=True)
    if how == "kill":
        time.sleep(600)


def in_this_process(locks_at_start: set[str]) -> dict[str, Any]:
    """What the StreamingDatasets of sections 1-3, each closed, left in this live process."""
    from streaming.base.util import clean_stale_shared_memory

    left = streaming_names(shm_entries())
    clean_stale_shared_memory()
    return {
        "datasets": upstream.UPSTREAM_CLOSED,
        "left": left,
        "left_after_clean": streaming_names(shm_entries()),
        "filelocks": sorted(streaming_filelocks() - locks_at_start),
    }


def side_by_side() -> dict[str, dict[str, Any]]:
    """Each loader in a child process, exiting normally and killed; counts by entry name."""
    from streaming.base.util import clean_stale_shared_memory

    out: dict[str, dict[str, Any]] = {}
    for which in ("ours", "upstream"):
        for how in ("exit", "kill"):
            before, locks_before = shm_entries(), streaming_filelocks()
            with tempfile.TemporaryFile("w+") as errors:
                child = subprocess.Popen(
                    [sys.executable, "-m", "bench.loader.shm", which, how],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    text=True,
                )
                if child.stdout is None:  # for the type checker: PIPE was asked for
                    raise RuntimeError("no pipe to the shm child")
                line = ""
                while not line.startswith("{"):
                    line = child.stdout.readline()
                    if not line:
                        child.wait()
                        errors.seek(0)
                        raise RuntimeError(
                            f"shm child {which}/{how} failed: {errors.read()[-2000:]}"
                        )
                if how == "kill":
                    child.kill()  # SIGKILL: no atexit, no finalizers
                child.wait(timeout=120)
                child.stdout.close()
            time.sleep(2.0)  # let any resource tracker left behind finish its cleanup
            after = shm_entries()
            clean_stale_shared_memory()
            cleaned = shm_entries()
            report = json.loads(line)
            out[f"{which}|{how}"] = {
                "before": len(before),
                "while_alive": report["while_alive"],
                "after_del": report["after_del"],
                "left_streaming": streaming_names(after - before),
                "left_other": sorted(set(after - before) - set(streaming_names(after - before))),
                "left_after_clean": streaming_names(cleaned - before),
                "filelocks": sorted(streaming_filelocks() - locks_before),
            }
    return out


def section(parent: dict[str, Any], shm: dict[str, dict[str, Any]]) -> list[str]:
    """Section 4 of the report."""
    lines = [
        "## 4. Shared memory in /dev/shm (and lock files in /tmp)",
        "",
        "Each loader in a child process of its own (`python -m bench.loader.shm WHICH HOW`). "
        "Ours reads 2,000 samples one by one and 2,000 through `make_loader(num_workers=2)`; "
        "upstream reads 2,000 samples of `StreamingDataset(shuffle=True)`. The child then drops "
        "the loader (`del` + `gc.collect()`; upstream has no public close) and either exits "
        "normally or is SIGKILLed by the parent (a crash, an OOM kill, a preemption). Entries "
        "are new names against the listing taken before the child started (the machine is "
        "shared: other jobs' entries come and go); streaming's own are `NNNNNN_<block>` in "
        "/dev/shm and `NNNNNN_{barrier,cache}_filelock` in /tmp. "
        "`streaming.base.util.clean_stale_shared_memory()` runs after each child.",
        "",
        "| loader | child | new while reading | still there after del + gc | left after the "
        "process ended (streaming / other) | left after clean_stale_shared_memory() | "
        "lock files left in /tmp |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for key, s in shm.items():
        which, how = key.split("|")
        ending = "exits normally" if how == "exit" else "SIGKILLed"
        lines.append(
            f"| {which} | {ending} | {len(s['while_alive'])} | {len(s['after_del'])} | "
            f"{len(s['left_streaming'])} / {len(s['left_other'])} | "
            f"{len(s['left_after_clean'])} | {len(s['filelocks'])} |"
        )
    seen = sorted({e for s in shm.values() for e in s["while_alive"]})
    lines += [
        "",
        f"Created while reading: {', '.join(f'`{e}`' for e in seen) or 'none'}.",
        "",
        f"In this benchmark's own long-lived process, sections 1-3 made and closed "
        f"{parent['datasets']} StreamingDatasets (each: `_iterator.exit()`, executor shutdown, "
        f"`del`, `gc.collect()`, `clean_stale_shared_memory()`). Before section 4, "
        f"**{len(parent['left'])}** streaming blocks were still in /dev/shm, "
        f"{len(parent['left_after_clean'])} after one more `clean_stale_shared_memory()`, and "
        f"{len(parent['filelocks'])} lock files in /tmp. Every StreamingDataset leaves its two "
        "lock files in /tmp for good; a later dataset skips any prefix whose lock file "
        "exists, while `clean_stale_shared_memory()` walks prefixes from 0 and stops at the "
        "first one without shared memory, so it never reaches the blocks of those later "
        "datasets. They go only when the process exits. Ours names nothing in /dev/shm and "
        "makes no lock files: its workers' batch slots are shared-memory buffers made through "
        "torch's file-descriptor sharing, whose names are unlinked as soon as they are made, "
        "so they go with the loader (or a killed process). This script deletes the streaming "
        "lock files it created before it ends.",
        "",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    """The child `side_by_side` starts, as a command."""
    cli = argparse.ArgumentParser(
        prog="python -m bench.loader.shm",
        description="Section 4's child process: read like a trainer, report /dev/shm as JSON, "
        "then exit or wait to be SIGKILLed.",
    )
    cli.add_argument("which", choices=("ours", "upstream"))
    cli.add_argument("how", choices=("exit", "kill"))
    args = cli.parse_args(argv)
    shm_child(args.which, args.how)


if __name__ == "__main__":
    main()
