"""Runs whose process is gone: found, marked failed, their pool slots freed; waits explained.

The `fm` command runs Dagster in its own process. Killed (`kill -9`, an OOM kill, a closed
laptop), it leaves its run STARTED in run storage, holding slots of the `ray` pool; without the
daemon nothing would ever notice, and the next run would wait for those slots forever, silently.
Each run the command starts is tagged with the pid, host and start time of its process; before
starting a run, `reap_dead_runs` fails every run of this host whose process is no longer there
(the start time guards against a reused pid) and frees the slots of runs that have ended; the
daemon's landing sensor does the same on every tick. While a run waits for a pool slot,
`SlotWatch` says which run holds it and since when, and reaps again: a holder that dies while
others wait for its slots wedges nothing either.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import uuid
from collections.abc import Callable

import dagster as dg

Log = Callable[[str], None]

PID_TAG = "fm/pid"
HOST_TAG = "fm/host"
PROCESS_START_TAG = "fm/process-start"  # the kernel's start time of the pid: pids are reused
INVOCATION_TAG = "fm/invocation"
_UNFINISHED = [
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def _start_time(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot, or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields are counted after the last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def process_tags(invocation: str | None = None) -> dict[str, str]:
    """Tags naming this process, for a run it is about to execute in-process."""
    pid = os.getpid()
    return {
        PID_TAG: str(pid),
        HOST_TAG: socket.gethostname(),
        PROCESS_START_TAG: _start_time(pid) or "",
        INVOCATION_TAG: invocation or uuid.uuid4().hex,
    }


def _process_gone(tags: dict[str, str]) -> bool:
    if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
        return False  # another machine's run (or not one of ours): its own host must judge
    started = _start_time(int(tags[PID_TAG]))
    if started is None:
        return True
    return bool(tags.get(PROCESS_START_TAG)) and started != tags[PROCESS_START_TAG]


def reap_dead_runs(instance: dg.DagsterInstance, log: Log, by: str) -> list[str]:
    """Fail the unfinished runs of this host whose process is gone; free slots of ended runs.

    `by` names who does it in the failure's message (the run's page in the UI says who marked
    it failed). Returns the ids of the runs marked failed.
    """
    reaped = []
    for run in instance.get_runs(dg.RunsFilter(statuses=_UNFINISHED)):
        if not _process_gone(dict(run.tags)):
            continue
        pid, host = run.tags[PID_TAG], run.tags[HOST_TAG]
        instance.report_run_failed(
            run,
            f"the process that ran it (pid {pid} on {host}) is gone: killed or crashed; "
            f"marked failed and its pool slots freed by {by}",
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        log(
            f"run {run.run_id[:8]} ({_what(run)}) died with its process (pid {pid}): "
            "marked failed, its pool slots freed"
        )
        reaped.append(run.run_id)
    storage = instance.event_log_storage
    for pool in storage.get_concurrency_keys():
        info = storage.get_concurrency_info(pool)
        holders = {s.run_id for s in info.claimed_slots} | {s.run_id for s in info.pending_steps}
        for run_id in holders:
            holder = instance.get_run_by_id(run_id)
            if holder is None or holder.is_finished:
                storage.free_concurrency_slots_for_run(run_id)
    return reaped


def _what(run: dg.DagsterRun) -> str:
    partition = run.tags.get("dagster/partition")
    return f"{run.job_name} of {partition}" if partition else run.job_name


def slot_holders(instance: dg.DagsterInstance, pool: str) -> list[str]:
    """Who holds the slots of `pool`: "run 1a2b3c4d (job of partition, pid N) since HH:MM:SS"."""
    info = instance.event_log_storage.get_concurrency_info(pool)
    described = []
    for run_id in sorted({s.run_id for s in info.claimed_slots}):
        record = instance.get_run_record_by_id(run_id)
        if record is None:
            described.append(f"run {run_id[:8]} (not in run storage)")
            continue
        run = record.dagster_run
        since = (
            dt.datetime.fromtimestamp(record.start_time).strftime("%H:%M:%S")
            if record.start_time
            else "?"
        )
        pid = run.tags.get(PID_TAG)
        where = f", pid {pid} on {run.tags.get(HOST_TAG)}" if pid else ""
        described.append(f"run {run_id[:8]} ({_what(run)}{where}) since {since}")
    return described


class SlotWatch:
    """While a run (found by its invocation tag) waits for a pool slot, say who holds it; fail
    holders whose process died meanwhile, freeing their slots."""

    def __init__(
        self, instance: dg.DagsterInstance, invocation: str, log: Log, every_s: float = 10.0
    ) -> None:
        self._instance, self._invocation, self._log = instance, invocation, log
        self._every_s = every_s
        self._stop = threading.Event()
        self._said: set[str] = set()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="fm-slot-watch")

    def __enter__(self) -> SlotWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self._check()
            except Exception as exc:  # a diagnostic must never break the run it watches
                self._log(f"(could not inspect pool slots: {exc})")
                return

    def _check(self) -> None:
        runs = self._instance.get_runs(
            dg.RunsFilter(tags={INVOCATION_TAG: self._invocation}), limit=1
        )
        if not runs:
            return
        run_id = runs[0].run_id
        storage = self._instance.event_log_storage
        for pool in storage.get_concurrency_keys():
            info = storage.get_concurrency_info(pool)
            waiting = [
                s.step_key
                for s in info.pending_steps
                if s.run_id == run_id and s.assigned_timestamp is None
            ]
            if not waiting:
                continue
            if reap_dead_runs(self._instance, self._log, by="an fm command waiting for its slots"):
                continue  # their slots are free: the run claims them at its next try
            holders = slot_holders(self._instance, pool)
            message = (
                f"{', '.join(waiting)} waiting for a slot of pool {pool!r} "
                f"(limit {info.slot_count}), held by {'; '.join(holders) or 'nobody yet'}"
            )
            if message not in self._said:
                self._said.add(message)
                self._log(message)
