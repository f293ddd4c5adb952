"""What every benchmark shares: the shared data, timing and medians, interleaved repeats, the
stamp of a run (command, commit, machine, load) and the command line.

A benchmark runs from the repository root as `python -m bench.<name>` and writes one Markdown
results table; its first paragraph is `Stamp.header()`, which names the commit it ran on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

# The shared, read-only data beside the repository: read in place, never copied into it.
SHARED_DATA = REPO.parent / "shared" / "data"
WARC_DIR = SHARED_DATA / "warc"
WARC_FILES = sorted(WARC_DIR.glob("*.warc.gz"))  # the four WARCs; their WET/WAT twins end .wet.gz
NEOX_TOKENIZER = SHARED_DATA / "tokenizers" / "gpt-neox-20b.json"
ARTICLE_BENCHMARK = SHARED_DATA / "extraction" / "article-extraction-benchmark"
ARTICLE_TRUTH = ARTICLE_BENCHMARK / "ground-truth.json"
ARTICLE_HTML_FILES = sorted((ARTICLE_BENCHMARK / "html").glob("*.html.gz"))
EVALSETS = SHARED_DATA / "evalsets"
PRESIDIO = SHARED_DATA / "pii" / "presidio-synth-v2.json"
CLOUGH_STEVENSON = SHARED_DATA / "neardup" / "clough-stevenson"

MB = 1e6
T = TypeVar("T")


def log(message: str) -> None:
    """A progress line on stdout, stamped with the time of day."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- timing -----------------------------------------------------------------------------------


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """fn()'s result, its wall seconds and this process's CPU seconds (all threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and every live descendant (Linux /proc).

    A local Ray's daemons and workers are all descendants of the process that started it, so
    the difference of two readings is the CPU the whole run spent in between, whatever else the
    shared machine runs. Each process's own time plus its reaped children's counts once: reaped
    children have left the tree.
    """
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # the process exited while we looked
        # After the parenthesised command: state, ppid (field 4), ..., utime..cstime (14..17).
        fields = stat.rsplit(")", 1)[1].split()
        parent[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(v) for v in fields[11:15])
    tree = {os.getpid()}
    while True:
        children = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        if not children:
            break
        tree |= children
    return sum(ticks.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used so far, all cores (`/proc/stat`).

    Less `tree_cpu_seconds()` over the same interval, it is what the machine's other tenants
    took while a run ran: divided by the wall time, the cores they kept busy.
    """
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is counted in user already)
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def tree_timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """fn()'s result, its wall seconds and the CPU seconds of the whole process tree."""
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started, tree_cpu_seconds() - cpu


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def median_and_range(values: Sequence[float], fmt: str = ".2f") -> str:
    """'median (min–max)' of `values` in `fmt`; the value alone when there is one."""
    if len(values) == 1:
        return f"{values[0]:{fmt}}"
    return f"{median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def met(ok: bool) -> str:
    """A goal's verdict as a report writes it."""
    return "met" if ok else "**NOT met**"


# -- interleaved repeats ----------------------------------------------------------------------


def rotation(names: Sequence[T], step: int) -> list[T]:
    """`names` starting at position `step` (modulo their count) and wrapping around."""
    at = step % len(names)
    return [*names[at:], *names[:at]]


def interleave(
    paths: dict[str, Callable[[], T]], repeats: int, *, rotate: bool = True
) -> dict[str, list[T]]:
    """Each path's results over `repeats` rounds, every path once per round, back to back.

    A burst of load from the machine's other tenants then lands on all paths alike instead of
    on one. With `rotate`, round r starts at path r, so no path always follows the same one.
    """
    names = list(paths)
    results: dict[str, list[T]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in rotation(names, repeat) if rotate else names:
            results[name].append(paths[name]())
    return results


# -- the stamp of a run -----------------------------------------------------------------------


def git_commit() -> str:
    """`git rev-parse --short HEAD` of the repository, plus "+dirty" when its files differ.

    Results tables are left out of the comparison: rerunning several benchmarks one after
    another rewrites them, and that must not mark the later runs dirty.
    """

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changes = git("status", "--porcelain", "--", ".", ":!bench/results", ":!bench/RESULTS.md")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{commit}+dirty" if changes else commit


def machine() -> str:
    """CPUs (and model), memory, OS and architecture, Python."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = f" ({line.split(':', 1)[1].strip()})"
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} CPUs{model}, {memory:.0f} GiB RAM, {platform.system()} "
        f"{platform.machine()}, Python {platform.python_version()}"
    )


def versions(names: Sequence[str]) -> str:
    """'name version' of each installed distribution in `names`, comma-separated."""
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


@dataclass(frozen=True)
class Stamp:
    """How, where and on which commit one run ran: stamped into its results table."""

    command: str
    commit: str
    started_at: dt.datetime
    elapsed_s: float
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    libraries: tuple[str, ...]

    def header(self) -> str:
        """'Written by `COMMAND` on commit `abc1234`, DATE UTC; the whole run took T.'"""
        return (
            f"Written by `{self.command}` on commit `{self.commit}`, "
            f"{self.started_at:%Y-%m-%d %H:%M} UTC; the whole run took "
            f"{duration(self.elapsed_s)}."
        )

    def machine_line(self) -> str:
        """The machine, Python and key library versions, and the load average at both ends."""
        libraries = versions(self.libraries)
        return (
            f"Machine: {machine()}{'; ' + libraries if libraries else ''}. Load average (1 min) "
            f"{self.load_start[0]:.1f} at the start, {self.load_end[0]:.1f} at the end."
        )


@dataclass(frozen=True)
class RunStart:
    """What is recorded when a run starts; `finish` makes its `Stamp`."""

    command: str
    commit: str
    started_at: dt.datetime
    clock: float
    load: tuple[float, float, float]

    @classmethod
    def now(cls, command: str) -> RunStart:
        return cls(
            command=command,
            commit=git_commit(),
            started_at=dt.datetime.now(dt.UTC),
            clock=time.perf_counter(),
            load=os.getloadavg(),
        )

    def finish(self, libraries: Sequence[str] = ()) -> Stamp:
        """The stamp, with the load average and the elapsed time as of now."""
        return Stamp(
            command=self.command,
            commit=self.commit,
            started_at=self.started_at,
            elapsed_s=time.perf_counter() - self.clock,
            load_start=self.load,
            load_end=os.getloadavg(),
            libraries=tuple(libraries),
        )


# -- the command line -------------------------------------------------------------------------


def parser(module: str, description: str, output: Path, quick: str) -> argparse.ArgumentParser:
    """The options every benchmark takes: `--quick` (what it shortens) and `--output`."""
    cli = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    cli.add_argument("--quick", action="store_true", help=quick)
    shown = output.relative_to(REPO) if output.is_relative_to(REPO) else output
    cli.add_argument(
        "--output", type=Path, default=output, help=f"the Markdown results table ({shown})"
    )
    return cli


def rerun_command(cli: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> str:
    """How this run was started (`python -m bench.NAME ARGS`), less `--output`: where a run
    wrote is not how it measured."""
    kept: list[str] = []
    skip = False
    for arg in sys.argv[1:] if argv is None else argv:
        if skip:
            skip = False
        elif arg == "--output":
            skip = True
        elif not arg.startswith("--output="):
            kept.append(arg)
    return " ".join([cli.prog, *(shlex.quote(arg) for arg in kept)])


def write_report(path: Path, text: str) -> None:
    """Write a results table (one trailing newline) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    log(f"wrote {path}")
