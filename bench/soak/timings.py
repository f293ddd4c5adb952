"""Where one batch's run spent its time, read from what the platform records in the run's
Dagster event log: the run's start and end, each step's start and end, and each stage's
progress messages (the same messages `bench.spine` splits into plan / Ray / commit).

A stage reports "<stage>: K kept, Q quarantined in Ts" when `run_stage` returns; T is its own
seconds from the stage lookups to the stage-run row, so it started T before that message.
Between the two, `bench.fm_home.stage_phases` splits it at its plan and "k/N done" messages;
the part after the last Ray task is the Iceberg commits (output, quarantine, side tables) and
the stage-run row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg

from bench.fm_home import StagePhases, stage_phases

_STAGE_DONE = re.compile(r"^(\w+): \d+ kept, \d+ quarantined in ([\d.]+)s$")


@dataclass(frozen=True)
class Event:
    """One record of a run's event log, as the benchmark needs it."""

    timestamp: float
    step: str | None
    kind: str  # the Dagster event type ("STEP_START", ...) or "LOG" for a message
    message: str


@dataclass(frozen=True)
class StageTime:
    """One stage of one run."""

    stage: str
    step_s: float  # the Dagster step: the stage, its materialization and its checks
    stage_s: float  # `run_stage` alone, as the stage reported it
    phases: StagePhases


@dataclass(frozen=True)
class RunTime:
    """One batch's run."""

    run_s: float  # Dagster's run, from its start to its success
    stages: tuple[StageTime, ...]

    def stage(self, name: str) -> StageTime:
        for stage in self.stages:
            if stage.stage == name:
                return stage
        raise KeyError(f"the run has no stage {name}: it ran {[s.stage for s in self.stages]}")

    @property
    def commit_s(self) -> float:
        """Every stage's Iceberg commits and stage-run row."""
        return sum(s.phases.commit_s for s in self.stages)

    @property
    def stages_s(self) -> float:
        return sum(s.stage_s for s in self.stages)


def run_time(events: Sequence[Event]) -> RunTime:
    """Split a successful run's events into the run's, each step's and each stage's seconds."""
    by_kind: dict[str, list[Event]] = {}
    for event in events:
        by_kind.setdefault(event.kind, []).append(event)
    if not by_kind.get("PIPELINE_START") or not by_kind.get("PIPELINE_SUCCESS"):
        raise ValueError("the run did not start and succeed: its event log has no run span")
    run_s = by_kind["PIPELINE_SUCCESS"][-1].timestamp - by_kind["PIPELINE_START"][0].timestamp
    step_start = {e.step: e.timestamp for e in by_kind.get("STEP_START", [])}
    step_end = {e.step: e.timestamp for e in by_kind.get("STEP_SUCCESS", [])}
    stages = []
    for event in by_kind.get("LOG", []):
        done = _STAGE_DONE.match(event.message)
        if not done or event.step is None:
            continue
        name, ended = done.group(1), event.timestamp
        started = ended - float(done.group(2))
        messages = [
            (e.timestamp, e.message)
            for e in by_kind["LOG"]
            if e.step == event.step and started <= e.timestamp <= ended
        ]
        if event.step not in step_start or event.step not in step_end:
            raise ValueError(f"step {event.step} reported its stage but did not succeed")
        stages.append(
            StageTime(
                stage=name,
                step_s=step_end[event.step] - step_start[event.step],
                stage_s=ended - started,
                phases=stage_phases(name, started, ended, messages),
            )
        )
    return RunTime(run_s=run_s, stages=tuple(stages))


def read_events(instance: dg.DagsterInstance, run_id: str) -> list[Event]:
    """The run's event log from the Dagster instance."""
    return [
        Event(
            timestamp=float(entry.timestamp),
            step=entry.step_key,
            kind=entry.dagster_event.event_type_value if entry.dagster_event else "LOG",
            message=entry.user_message or "",
        )
        for entry in instance.all_logs(run_id)
    ]
