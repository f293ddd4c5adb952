"""A TCP proxy on loopback that breaks connections on demand, in front of a real server.

Faults are injected on the wire, as a flaky network or an overloaded store would cause them:
`fail_next(n)` makes the next `n` connections forward the request and a little of the answer,
then reset (RST) — a read that fails halfway through an object. `fail_all()` resets every new
connection until `heal()`. `stall()` holds every answer (on new and pooled connections alike)
until `resume()`, as a store that stops answering for a while; `stalled` is set once an answer
is being held. Nothing of the client or the server is mocked.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Iterator

_CUT_AFTER_BYTES = 1_500  # of the answer, before the reset: headers and a little body


class FlakyProxy:
    """Forwards 127.0.0.1:`port` to `target_port`; injects connection resets when told to."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._to_fail = 0
        self._fail_all = False
        self.injected = 0  # answers cut short by a reset so far
        self.connections = 0
        self._flowing = threading.Event()
        self._flowing.set()
        self.stalled = threading.Event()  # an answer is being held by stall()
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, count: int) -> None:
        with self._lock:
            self._to_fail += count

    def fail_all(self) -> None:
        with self._lock:
            self._fail_all = True

    def heal(self) -> None:
        with self._lock:
            self._fail_all = False
            self._to_fail = 0

    def stall(self) -> None:
        """Hold every answer from the server until `resume()`."""
        self.stalled.clear()
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()

    def _should_fail(self) -> bool:
        with self._lock:
            self.connections += 1
            if self._fail_all:
                return True
            if self._to_fail > 0:
                self._to_fail -= 1
                return True
            return False

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            fail = self._should_fail()
            threading.Thread(target=self._serve, args=(client, fail), daemon=True).start()

    def _serve(self, client: socket.socket, fail: bool) -> None:
        """Relay both ways from one thread (select), so a reset is never held up by a reader
        blocked on the socket in another thread."""
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            _reset(client)
            return
        answered = 0
        peers = {client: upstream, upstream: client}
        try:
            while True:
                readable, _, _ = select.select(list(peers), [], [], 60)
                if not readable:
                    break
                for source in readable:
                    chunk = source.recv(65536)
                    if not chunk:
                        return
                    if source is upstream and not self._flowing.is_set():
                        self.stalled.set()
                        self._flowing.wait(timeout=300)
                    if fail and source is upstream:
                        chunk = chunk[: _CUT_AFTER_BYTES - answered]
                        answered += len(chunk)
                    peers[source].sendall(chunk)
                    if fail and answered >= _CUT_AFTER_BYTES:
                        with self._lock:
                            self.injected += 1
                        return
        except OSError:
            return
        finally:
            if fail:
                _reset(client)
                _reset(upstream)
            else:
                client.close()
                upstream.close()


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN: the peer sees 'connection reset by peer'."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def flaky_proxy(target_port: int) -> Iterator[FlakyProxy]:
    proxy = FlakyProxy(target_port)
    try:
        yield proxy
    finally:
        proxy.close()
