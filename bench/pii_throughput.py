"""PII rules' speed for `python -m bench.pii`: throughput on the evaluation file and 5 MB lines.

Throughput: `find_pii` on every text and `redact_batch` on all of them, wall seconds per repeat
(one process, one core). Robustness: single-line 5 MB inputs, the worst cases for the patterns'
look-arounds and the Python loop, one run each. Nothing here asserts a speed; `tests/test_pii.py`
checks that a 5 MB line completes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from bench.harness import median, median_and_range
from fm_assets.curation.pii.redaction import find_pii, redact_batch

StressRow = tuple[str, int, float, float, int]  # input, characters, wall s, CPU s, spans found


def seconds_of(run: Callable[[], object], repeats: int) -> list[float]:
    """Wall seconds of each of `repeats` calls of `run`."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return times


def throughput_timings(texts: list[str], repeats: int) -> dict[str, list[float]]:
    """Wall seconds of `find_pii` on every text and of `redact_batch` on all, per repeat."""
    return {
        "find_pii per text": seconds_of(lambda: [find_pii(t) for t in texts], repeats),
        "redact_batch": seconds_of(lambda: redact_batch(texts), repeats),
    }


# Single-line 5 MB inputs: the worst cases for the patterns' look-arounds and the Python loop.
_PARAGRAPH = (
    "The committee met on Tuesday to review the quarterly figures, which showed a 12% rise in "
    "visitors and 3,400 new members since March. Several proposals were discussed at length, "
    "including a new reading room, longer opening hours and a partnership with the museum. "
)
STRESS_INPUTS: dict[str, Callable[[], str]] = {
    "prose with one PII item per ~2 KB": lambda: (
        (_PARAGRAPH * 8 + "Questions? Call 0490 75 40 81 or write to desk@example.org. ") * 2_300
    ),
    "prose with PII every ~100 chars": lambda: (
        (
            "Call me at +1-984-182-0190 or mail jo.doe@example.com; server 8.8.8.8 (lan 10.0.0.7), "
            "card 4111 1111 1111 1111. "
        )
        * 45_000
    ),
    "one run of digits": lambda: "7" * 5_000_000,
    "digits and single spaces": lambda: "12 34 56 " * 560_000,
    "digits and dots": lambda: "1.2.3.4." * 630_000,
    "hex and colons": lambda: "ab:cd:" * 840_000,
    "at-signs and letters": lambda: "a@b" * 1_700_000,
    "binary junk decoded as text": lambda: bytes(range(256)).decode("latin-1") * 20_000,
}


def stress_rows() -> list[StressRow]:
    """(input, characters, wall seconds, CPU seconds, spans found) per 5 MB line."""
    rows = []
    for name, make in STRESS_INPUTS.items():
        text = make()
        wall, cpu = time.perf_counter(), time.process_time()
        found = find_pii(text)
        rows.append(
            (name, len(text), time.perf_counter() - wall, time.process_time() - cpu, len(found))
        )
    return rows


def throughput_section(
    timings: dict[str, list[float]], stress: Sequence[StressRow], documents: int, text_mb: float
) -> list[str]:
    """The throughput table (over the file of `documents` texts, `text_mb` MB) and the 5 MB
    lines' table."""
    lines = [
        "## Throughput (one process, one core; median of the repeats, min–max in brackets)",
        "",
        "| call | seconds for the file | docs/s | MB/s |",
        "|---|---:|---:|---:|",
    ]
    for name, times in timings.items():
        seconds = median(times)
        lines.append(
            f"| {name} | {median_and_range(times, '.3f')} | {documents / seconds:,.0f} "
            f"| {text_mb / seconds:.2f} |"
        )
    lines += [
        "",
        "## Single-line 5 MB inputs (robustness, one run each)",
        "",
        "| input | characters | wall s | CPU s | spans found |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, size, seconds, cpu_seconds, found in stress:
        lines.append(f"| {name} | {size:,} | {seconds:.2f} | {cpu_seconds:.2f} | {found:,} |")
    return lines
