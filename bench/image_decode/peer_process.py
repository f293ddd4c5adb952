"""The peer's process, started once and kept warm between rounds: `peer.py` under the side
venv's python, spoken to one JSON line at a time."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.image_decode.ours import Pass

PEER_SCRIPT = Path(__file__).with_name("peer.py")


class PeerProcess:
    """`peer.py` on the images of `directory`; `run(n)` times one pass over the first n."""

    def __init__(self, python: Path, directory: Path, max_side: int, quality: int) -> None:
        env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1", "PYTHONPATH": ""}
        self._stderr = (directory.parent / "peer.stderr").open("w+")
        self._process = subprocess.Popen(
            [str(python), str(PEER_SCRIPT), str(directory), str(max_side), str(quality)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )
        if self._process.stdin is None or self._process.stdout is None:
            raise RuntimeError("the img2dataset peer started without pipes")
        self._to, self._from = self._process.stdin, self._process.stdout
        self.count = int(self._read()["ready"])

    def _read(self) -> dict[str, Any]:
        line = self._from.readline()
        if not line:
            self._stderr.seek(0)
            raise RuntimeError(f"the img2dataset peer exited: {self._stderr.read()[-2000:]}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, count: int = 0) -> Pass:
        """One timed pass over the first `count` images (all when 0), timed by the peer."""
        self._to.write(f"run {count}\n")
        self._to.flush()
        reply = self._read()
        images = reply["images"]
        errors = [error for _, _, error, _, _ in images if error is not None]
        if errors:
            raise RuntimeError(f"img2dataset's resizer failed on benchmark images: {errors[:3]}")
        return Pass(
            wall_s=float(reply["wall"]),
            cpu_s=float(reply["cpu"]),
            parts={name: float(s) for name, s in reply["parts"].items()},
            out_bytes=sum(int(n) for _, _, _, _, n in images),
            sizes=[(int(w), int(h)) for w, h, _, _, _ in images],
            phashes=[phash_from_hex(value) for _, _, _, value, _ in images],
        )

    def decoders(self) -> dict[str, float]:
        """CPU seconds of OpenCV's and Pillow's JPEG decoders alone over every image."""
        self._to.write("decoders\n")
        self._to.flush()
        return {name: float(s) for name, s in self._read().items()}

    def close(self) -> None:
        """Ask it to quit; end it by its own pid if it does not."""
        if self._process.poll() is None:
            try:
                self._to.write("quit\n")
                self._to.close()
            except BrokenPipeError:
                pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._stderr.close()

    def __enter__(self) -> PeerProcess:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def phash_from_hex(text: str) -> int:
    """imagehash's 16 hex digits as our signed int64 value."""
    value = int(text, 16)
    return value - (1 << 64) if value >= 1 << 63 else value
