"""The library's other fast path for section 2: `encode_batch_fast` in one process per CPU, one
tokenizer thread each (the layout of the stage's Ray workers), each process holding its share
of the texts before the clock starts.

In one process with `TOKENIZERS_PARALLELISM=true` the library spreads a batch over its own
thread pool; on some machines that costs more CPU per token than one thread per process does.
The A/B table takes the faster of the two as the library's limit, so neither layout's overhead
on a given machine flatters the stage.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from types import TracebackType

from bench.harness import tree_cpu_seconds


def _serve(connection: Connection, tokenizer_path: str) -> None:
    """A worker process: hold texts when sent them, encode the held texts on "go"."""
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
    """`count` spawned worker processes, each with the tokenizer at `tokenizer_path` loaded."""

    def __init__(self, tokenizer_path: str, count: int) -> None:
        context = mp.get_context("spawn")  # not fork: this process runs Ray's threads
        self.connections: list[Connection] = []
        self.processes = []
        for _ in range(count):
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs, tokenizer_path), daemon=True)
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
