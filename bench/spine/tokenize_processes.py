"""The library's multi-process layouts for section 2: `encode_batch_fast` in `count` worker
processes with `threads` tokenizer threads each, each process holding its share of the texts
before the clock starts.

Two layouts run this way: B2, one process per CPU with one thread each, and B3, the tokenize
stage's own layout (one slice per Ray worker, a worker per CPU, each worker running the library's
pool of `compute.LIBRARY_THREADS_PER_WORKER` threads). In one process (B1) the library spreads a
batch over its own thread pool; which layout costs less CPU per token differs from machine to
machine, so the A/B table takes the fastest of the three as the library's limit.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from types import TracebackType

from bench.harness import tree_cpu_seconds


def _serve(connection: Connection, tokenizer_path: str, threads: int) -> None:
    """A worker process: hold texts when sent them, encode the held texts on "go"."""
    if "tokenizers" in sys.modules:
        # The library reads its thread settings once, when its pool starts.
        raise RuntimeError("tokenizers was imported before its thread settings were made")
    if threads > 1:  # as `compute.worker_environment` sets it for the stage's Ray workers
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
        os.environ["RAYON_NUM_THREADS"] = str(threads)
    else:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_path)
    held: list[str] = []
    while True:
        message = connection.recv()
        if message is None:
            return
        if message == "go":
            encodings = tokenizer.encode_batch_fast(held, add_special_tokens=False)
            connection.send(sum(len(e) for e in encodings))
        else:
            held = message
            connection.send(len(held))


def shares(texts: Sequence[str], count: int) -> list[list[str]]:
    """`texts` in `count` contiguous runs of about equal characters (not documents: page
    lengths vary tenfold, and the longest share would set the time)."""
    total = sum(map(len, texts))
    runs: list[list[str]] = [[] for _ in range(count)]
    done = 0
    for text in texts:
        middle = done + len(text) // 2  # a text goes with the run its middle falls in
        runs[min(count - 1, middle * count // max(1, total))].append(text)
        done += len(text)
    return runs


class EncodingProcesses:
    """`count` spawned worker processes, each with the tokenizer at `tokenizer_path` loaded and
    `threads` tokenizer threads."""

    def __init__(self, tokenizer_path: str, count: int, threads: int = 1) -> None:
        self.count, self.threads = count, threads
        context = mp.get_context("spawn")  # not fork: this process runs Ray's threads
        self.connections: list[Connection] = []
        self.processes = []
        for _ in range(count):
            mine, theirs = context.Pipe()
            process = context.Process(
                target=_serve, args=(theirs, tokenizer_path, threads), daemon=True
            )
            process.start()
            self.connections.append(mine)
            self.processes.append(process)

    def encode(self, texts: Sequence[str]) -> tuple[float, float, int]:
        """Wall seconds, CPU seconds (process tree) and tokens of encoding `texts`, split into
        one contiguous share per process (sent before timing starts)."""
        runs = shares(texts, len(self.connections))
        for connection, share in zip(self.connections, runs, strict=True):
            connection.send(share)
        for connection in self.connections:
            connection.recv()
        cpu = tree_cpu_seconds()
        started = time.perf_counter()
        for connection in self.connections:
            connection.send("go")
        tokens = sum(int(connection.recv()) for connection in self.connections)
        seconds = time.perf_counter() - started
        return seconds, tree_cpu_seconds() - cpu, tokens

    def __enter__(self) -> EncodingProcesses:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for connection in self.connections:
            with contextlib.suppress(OSError):  # a worker that died already
                connection.send(None)
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
