"""A TCP proxy on loopback that breaks connections on demand, in front of a real server.

Faults are injected on the wire, as a flaky network or an overloaded store would cause them:
`fail_next(n)` makes the next `n` connections forward the request and a little of the answer,
then reset (RST) — a read that fails halfway through an object. `fail_all()` resets every new
connection until `heal()`. `stall()` holds every answer (on new and pooled connections alike)
until `resume()`, as a store that stops answering for a while; `stalled` is set once an answer
is being held.

`answer_next(fault, n, key=...)` reads the HTTP requests crossing it and answers the next `n`
reads (GET or HEAD) of an object whose path contains `key` itself, never forwarding them: an S3
error (`HTTP_500`, `HTTP_503`, `SLOW_DOWN`, or `NO_SUCH_KEY`: a 404 for an object that exists),
or `HANG`: nothing at all until the client gives up (its read timeout) and closes. Other
requests on the same (kept-alive) connection go through. Nothing of the client or the server is
mocked.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

_CUT_AFTER_BYTES = 1_500  # of the answer, before the reset: headers and a little body
_HANG_LIMIT_S = 120.0  # a hung read is closed by the proxy if the client never gives up


@dataclass(frozen=True)
class Fault:
    """What the proxy answers to a read instead of the server: an S3 error, or nothing."""

    name: str
    status: int = 0  # 0: no answer at all (the read hangs)
    reason: str = ""
    code: str = ""  # the S3 error code in the XML body
    message: str = ""


HANG = Fault("hang")
HTTP_500 = Fault(
    "500", 500, "Internal Server Error", "InternalError", "We encountered an internal error."
)
HTTP_503 = Fault(
    "503", 503, "Service Unavailable", "ServiceUnavailable", "Please reduce your request rate."
)
SLOW_DOWN = Fault("SlowDown", 503, "Slow Down", "SlowDown", "Please reduce your request rate.")
READS = ("GET", "HEAD")
NO_SUCH_KEY = Fault("NoSuchKey", 404, "Not Found", "NoSuchKey", "The specified key does not exist.")


@dataclass
class _Planned:
    fault: Fault
    left: int
    key: str
    methods: tuple[str, ...]


class FlakyProxy:
    """Forwards 127.0.0.1:`port` to `target_port`; injects faults when told to."""

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
        self._planned: list[_Planned] = []
        self.injected = 0  # faults injected so far (answers cut, errors answered, reads hung)
        self.connections = 0
        self.hangs_given_up = 0  # hung reads the client closed itself (it timed out)
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

    def answer_next(
        self, fault: Fault, count: int, *, key: str = "", methods: tuple[str, ...] = READS
    ) -> None:
        """Answer the next `count` reads (requests of `methods`) of objects whose path contains
        `key` with `fault`."""
        with self._lock:
            self._planned.append(_Planned(fault, count, key, methods))

    def unanswered(self) -> int:
        """Faults planned by `answer_next` not injected yet."""
        with self._lock:
            return sum(p.left for p in self._planned)

    def heal(self) -> None:
        with self._lock:
            self._fail_all = False
            self._to_fail = 0
            self._planned.clear()

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

    def _fault_for(self, method: str, target: str) -> Fault | None:
        path = target.split("?", 1)[0]
        with self._lock:
            for planned in self._planned:
                if planned.left > 0 and method in planned.methods and planned.key in path:
                    planned.left -= 1
                    self.injected += 1
                    return planned.fault
        return None

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
        requests = _Requests()
        try:
            while True:
                readable, _, _ = select.select(list(peers), [], [], 60)
                if not readable:
                    break
                for source in readable:
                    chunk = source.recv(65536)
                    if not chunk:
                        return
                    if source is client:
                        for data, request in requests.feed(chunk):
                            fault = self._fault_for(*request) if request else None
                            if fault is None:
                                upstream.sendall(data)
                            elif fault.status:
                                client.sendall(_error_answer(fault, *request))
                            else:
                                self._hang(client)
                                return
                        continue
                    if not self._flowing.is_set():
                        self.stalled.set()
                        self._flowing.wait(timeout=300)
                    if fail:
                        chunk = chunk[: _CUT_AFTER_BYTES - answered]
                        answered += len(chunk)
                    client.sendall(chunk)
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

    def _hang(self, client: socket.socket) -> None:
        """Say nothing until the client closes the connection (it timed out) or the limit."""
        deadline = time.monotonic() + _HANG_LIMIT_S
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([client], [], [], left)
            if readable and not client.recv(65536):
                with self._lock:
                    self.hangs_given_up += 1
                return


class _Requests:
    """Cuts the client's byte stream into HTTP/1.1 requests: (bytes, (method, target)) for a
    request head, (bytes, None) for body bytes or what cannot be parsed (then passed through)."""

    def __init__(self) -> None:
        self._head = b""
        self._body_left = 0
        self._opaque = False  # a chunked body: stop parsing this connection, relay it as is

    def feed(self, chunk: bytes) -> Iterator[tuple[bytes, tuple[str, str] | None]]:
        while chunk:
            if self._opaque:
                yield chunk, None
                return
            if self._body_left:
                body, chunk = chunk[: self._body_left], chunk[self._body_left :]
                self._body_left -= len(body)
                yield body, None
                continue
            self._head += chunk
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return  # the rest of the head comes in a later chunk
            head, chunk = self._head[: end + 4], self._head[end + 4 :]
            self._head = b""
            lines = head.decode("latin-1").split("\r\n")
            method, target = [*lines[0].split(" "), "", ""][:2]
            fields = (line.partition(":") for line in lines[1:])
            headers = {name.strip().lower(): value.strip() for name, _, value in fields}
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._opaque = True
            self._body_left = int(headers.get("content-length", "0") or 0)
            yield head, (method, target)


def _error_answer(fault: Fault, method: str, target: str) -> bytes:
    """An S3 error answer (XML body, as S3 and SeaweedFS send; none for a HEAD)."""
    resource = target.split("?", 1)[0]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{fault.code}</Code><Message>{fault.message}</Message>"
        f"<Resource>{resource}</Resource><RequestId>fm-flaky-proxy</RequestId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {fault.status} {fault.reason}\r\n"
        "Content-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n"
        "x-amz-request-id: fm-flaky-proxy\r\n"
        "\r\n"
    ).encode()
    return head if method == "HEAD" else head + body


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
