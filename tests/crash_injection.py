"""Crash injection: SIGKILL the run (or one Ray worker) at seeded random points of every step.

Shared by tests/test_crash_anywhere.py and the reliability benchmark. The process killed is
tests/crash_driver.py, which runs every stage of a batch, cuts its version and builds its shard
set, as a Dagster run of them does, and reports each step's start and progress messages. A kill
point is a step, one of the step's progress moments in an uninterrupted run (its start, its
planning, each batch of Ray tasks done, ...; never its last message, which follows its commit)
and a random delay after it, below half the time to the next moment: killing there means
starting the driver, waiting for that moment of the step, sleeping the delay and SIGKILLing its
process group. A worker kill SIGKILLs one Ray worker busy with a platform task, found in the
process tree of the Ray head.

What a crash may leave is compared with an uninterrupted run's result (`Contents`):
- every table partition of the batch (quarantine rows per stage) is either absent or identical
  to the uninterrupted run's: a reader never sees a partial partition;
- after a rerun, every partition, the version's content hash, the shard checksums and the
  samples' lineage are identical;
- files the killed attempts wrote and never committed are exactly what the orphan sweep removes.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.commands import operations
from fm_assets.execution import pipeline
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from fm_assets.storage.tables import declared_tables, table_spec
from tests.crash_driver import STEPS, VERSION_KEY
from tests.paths import NEOX_TOKENIZER, REPO, WGET_WARC
from tests.policies import opt_out_policy

SEQ_LEN = 512
STEP_TIMEOUT_S = 600.0
# The platform's Ray task functions (a busy worker's process title is `ray::<function>`).
TASKS = frozenset(
    {
        "process_files",
        "_scan",
        "_decide",
        "_read",
        "split_points",
        "sketch_slice",
        "band_candidates",
        "confirm_pairs",
        "resolve",
        "write_index_rows",
        "write_slice",
        "decide_one_slice",
        "_process",
    }
)
_TASK_TITLE = re.compile(r"^ray::(\w+)")


@dataclass(frozen=True)
class Home:
    """An FM_HOME with one landed batch, and the environment that reaches it."""

    settings: Settings
    env: dict[str, str]
    batch_id: str


def prepare(home: Path, ray_address: str, data: Path = WGET_WARC) -> Home:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env |= {"FM_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "RAY_ADDRESS": ray_address}
    # The subject is crashes, not curation: no source is filtered (and no classifier is needed).
    env["FM_POLICY_FILE"] = str(opt_out_policy(home.parent / f"{home.name}-policy"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    settings = load_settings(env)
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    batch, _ = operations.land(settings, [data], source="wget", license="Apache-2.0")
    return Home(settings, env, batch.batch_id)


class Driver:
    """One run of tests/crash_driver.py in its own process group, its progress read as it comes."""

    def __init__(self, home: Home) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.crash_driver",
                home.batch_id,
                str(NEOX_TOKENIZER),
                str(SEQ_LEN),
            ],
            cwd=REPO,
            env=home.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.events: list[tuple[float, str, str]] = []  # (monotonic time, start|end, step)
        self._changed = threading.Condition()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_errors, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("fm-crash: "):
                event, step = line.split()[1:3]
                with self._changed:
                    self.events.append((time.monotonic(), event, step))
                    self._changed.notify_all()

    def _read_errors(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line.rstrip())

    def wait_for(self, event: str, step: str, timeout: float = STEP_TIMEOUT_S) -> bool:
        """Block until the driver reports `event` for `step`; False if it ended first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(e == event and s == step for _, e, s in self.events):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    return any(e == event and s == step for _, e, s in self.events)
                self._changed.wait(timeout=0.2)
        return True

    def moments(self, step: str) -> int:
        """The step's start and progress messages seen so far."""
        return sum(s == step and e in ("start", "progress") for _, e, s in self.events)

    def wait_for_moment(self, step: str, number: int) -> bool:
        """Block until the step's `number`-th moment (0: its start); False if it ended first."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        with self._changed:
            while self.moments(step) <= number:
                if any(e == "end" and s == step for _, e, s in self.events):
                    return False
                if self.process.poll() is not None or time.monotonic() > deadline:
                    return False
                self._changed.wait(timeout=0.2)
        return True

    def last_started(self) -> str | None:
        started = [s for _, e, s in self.events if e == "start"]
        return started[-1] if started else None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)

    def finish(self) -> None:
        """Wait for a clean end; raise with its error output otherwise."""
        returncode = self.process.wait(timeout=STEP_TIMEOUT_S * len(STEPS))
        if returncode != 0:
            raise RuntimeError(f"the driver failed ({returncode}): {self.stderr[-30:]}")

    def profile(self) -> dict[str, list[float]]:
        """Per step of a finished run: for each of its moments before its commit, the seconds
        to the next moment (for the last one, to the step's end: its commit)."""
        out = {}
        for step in STEPS:
            moments = [t for t, e, s in self.events if s == step and e in ("start", "progress")]
            ends = [t for t, e, s in self.events if s == step and e == "end"]
            if step in pipeline.STAGE_NAMES:
                moments = moments[:-1]  # a stage's last message says what it committed
            moments = moments or [t for t, _, s in self.events if s == step][:1]
            end = ends[-1] if ends else (moments[-1] if moments else 0.0)
            out[step] = [b - a for a, b in zip(moments, [*moments[1:], end], strict=True)] or [0.0]
        return out


# Per step: the seconds from each moment before its commit to the next (the last: to its end).
Profile = dict[str, list[float]]


def run_through(home: Home) -> Profile:
    """Run every step to the end; each step's moments before its commit and its seconds."""
    driver = Driver(home)
    driver.finish()
    return driver.profile()


# --- kill points -----------------------------------------------------------------------------


@dataclass(frozen=True)
class KillPoint:
    """SIGKILL the run a little after a moment of `step`; before that, if `worker_in` names a
    stage the run redoes first (the one killed last time), kill one of its busy Ray workers."""

    step: str
    moment: float  # which of the step's moments before its commit, as a fraction of them
    delay: float  # after that moment, as a fraction of the time to the next one (or the end)
    worker_in: str | None = None


def kill_points(seed: int, rounds: int = 1, worker_kills: int = 2) -> list[KillPoint]:
    """`rounds` kills of the run in every step, in step order, positions drawn from `seed`.

    `worker_kills` of them first kill a Ray worker while the run redoes the stage killed just
    before (a stage that runs Ray tasks): that run must finish the stage regardless.
    """
    rng = random.Random(seed)
    points = [
        KillPoint(step, rng.random(), rng.uniform(0.0, 0.5))
        for _ in range(rounds)
        for step in STEPS
    ]
    # The point after a stage's kill redoes that stage: a worker kill goes there.
    after_stage = [i for i in range(1, len(points)) if points[i - 1].step in pipeline.STAGE_NAMES]
    for i in rng.sample(after_stage, min(worker_kills, len(after_stage))):
        points[i] = KillPoint(points[i].step, points[i].moment, points[i].delay, points[i - 1].step)
    return points


@dataclass
class Kill:
    """What one kill point did."""

    point: KillPoint
    landed_in: str  # the step the run was in when killed ("finished" if it had ended)
    worker_pid: int | None = None  # the Ray worker killed first, if one was busy in time


def crash_at(home: Home, point: KillPoint, profile: Profile, ray_head: int) -> Kill:
    """Start the driver and kill at `point` (`profile`: of an uninterrupted run)."""
    driver = Driver(home)
    try:
        worker = None
        if point.worker_in is not None and driver.wait_for("start", point.worker_in):
            worker = _kill_busy_worker(ray_head, driver, point.worker_in)
            # The run lost a worker mid-stage: Ray retries its task and the stage completes.
            if not driver.wait_for("end", point.worker_in):
                raise RuntimeError(
                    f"the run died with its Ray worker in {point.worker_in}: {driver.stderr[-30:]}"
                )
        gaps = profile[point.step]
        moment = int(point.moment * len(gaps))
        if not driver.wait_for_moment(point.step, moment):
            if driver.process.poll() is not None:
                driver.finish()  # it ended (or failed) before the moment: say why
                return Kill(point, "finished", worker)
            # The step ended early: an earlier kill overshot into it, so this run found part of
            # it committed. Kill now, in whatever step runs: running the batch to its end here
            # would leave every later point nothing to kill.
            return _kill_now(driver, point, worker)
        # A fraction (under a half) of what followed this moment in the uninterrupted run: the
        # kill lands before the next moment, or in the commit after the last one, unless this
        # run is that much faster. (A delay scaled by the step's mean gap overshot whole short
        # steps: extraction's last gap is its commit, its mean one a trafilatura batch.)
        time.sleep(point.delay * gaps[moment])
        if driver.process.poll() is not None:
            driver.finish()
            return Kill(point, "finished", worker)
        return _kill_now(driver, point, worker)
    finally:
        if driver.process.poll() is None:
            driver.kill()


def _kill_now(driver: Driver, point: KillPoint, worker: int | None) -> Kill:
    """SIGKILL the run where it is; the kill lands in the last step it started."""
    step = driver.last_started() or point.step
    done = any(e == "end" and s == step for _, e, s in driver.events)
    driver.kill()
    return Kill(point, "finished" if done else step, worker)


def _kill_busy_worker(ray_head: int, driver: Driver, stage: str) -> int | None:
    """SIGKILL one Ray worker busy with a platform task while `driver` runs `stage`."""
    while driver.process.poll() is None and not any(
        e == "end" and s == stage for _, e, s in driver.events
    ):
        for pid in busy_ray_workers(ray_head):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            return pid
        time.sleep(0.01)
    return None


def busy_ray_workers(ray_head: int) -> list[int]:
    """Workers of the Ray whose head is `ray_head` (its `ray start` pid) running a platform task."""
    parents: dict[int, int] = {}
    titles: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        titles[int(entry.name)] = cmdline.split(b"\0")[0].decode(errors="replace")
    busy = []
    for pid, title in titles.items():
        match = _TASK_TITLE.match(title)
        if match is None or match.group(1) not in TASKS:
            continue
        ancestor = pid
        while ancestor > 1 and ancestor != ray_head:
            ancestor = parents.get(ancestor, 1)
        if ancestor == ray_head:
            busy.append(pid)
    return busy


# --- what a run leaves -----------------------------------------------------------------------

Rows = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Contents:
    """Everything a batch's run, its version and its shard set left, in comparable form."""

    partitions: dict[str, Rows]  # table (quarantine: "quarantine/<stage>") -> sorted rows
    version_hash: str | None
    shards: tuple[tuple[str, str, int], ...]  # (name, sha256, bytes) of the published set
    lineage: Rows = field(default=())  # sample_documents rows of the shard set


def _rows(table: pa.Table) -> Rows:
    """Rows as sorted tuples of reprs, without times (which differ from run to run)."""
    keep = [f.name for f in table.schema if not pa.types.is_timestamp(f.type)]
    rows = table.select(keep).to_pylist()
    return tuple(sorted(tuple(repr(row[k]) for k in keep) for row in rows))


def batch_tables() -> list[str]:
    """Tables holding rows per landing batch (a `batch_id` column)."""
    return [t for t in declared_tables() if "batch_id" in table_spec(t).schema.names]


def contents(settings: Settings, batch_id: str) -> Contents:
    from fm_assets.shards.build import read_shard_set_row
    from fm_assets.versions.dataset_version import read_version
    from fm_loader.format.manifest import read_manifest

    partitions: dict[str, Rows] = {}
    for name in batch_tables():
        rows = catalog.read_batch(settings, name, batch_id)
        if name == "quarantine":
            for stage in STEPS:
                mine = rows.filter(pc.equal(rows.column("stage"), stage))
                partitions[f"quarantine/{stage}"] = _rows(mine)
        else:
            partitions[name] = _rows(rows)
    version = read_version(settings, VERSION_KEY)
    shards: tuple[tuple[str, str, int], ...] = ()
    lineage: Rows = ()
    key = None
    for row in catalog.read_table(settings, "shard_sets").to_pylist():
        if row["version_key"] == VERSION_KEY:
            key = row["shard_set_key"]
    if key is not None:
        row = read_shard_set_row(settings, key)
        assert row is not None
        manifest = read_manifest(str(row["uri"]))
        shards = tuple((s.name, s.sha256, s.bytes) for s in manifest.shards)
        lineage = _rows(
            catalog.read_table(
                settings,
                "sample_documents",
                catalog.where_equal("shard_set_key", key),
                namespace=catalog.batch_namespace(settings, batch_id),
            )
        )
    return Contents(partitions, version.content_hash if version else None, shards, lineage)


def partial(seen: Contents, whole: Contents) -> list[str]:
    """What a reader could see half-done: partitions neither absent nor whole, a version other
    than the uninterrupted one's, a published shard set with other shards."""
    bad = [
        name
        for name, rows in seen.partitions.items()
        if rows and rows != whole.partitions.get(name)
    ]
    if seen.version_hash is not None and seen.version_hash != whole.version_hash:
        bad.append(f"dataset version {VERSION_KEY}")
    if seen.shards and seen.shards != whole.shards:
        bad.append("shard set")
    return bad


def unreferenced_files(settings: Settings) -> list[str]:
    """Data files of any table that no snapshot references (what the orphan sweep removes)."""
    import datetime as dt

    from fm_assets.storage.orphans import sweep_orphans

    return sweep_orphans(settings, grace=dt.timedelta(0), dry_run=True).removed
