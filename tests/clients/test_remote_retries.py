"""Retries of transient object-store failures, through a fault-injecting proxy in front of moto.

`FaultProxy` is a small threaded HTTP proxy (stdlib only) on 127.0.0.1, given to the daemon as
`--endpoint-url`. It forwards every request verbatim to moto (method, path and query, every
header including Host and the SigV4 Authorization: object_store signs for the proxy's address;
moto checks no signature, so the tests recompute each one over what the proxy forwarded) and
returns moto's response, except for the faults it injects and counts:
  - "503":      `503 Slow Down` with an S3 error document, without asking moto;
  - "drop":     the request is read, then the connection is closed with no response;
  - "truncate": moto's status and headers (Content-Length included) and half of its body, then
                the connection is closed (a body broken mid-stream).

The daemon publishes in the mount root's `user.zarrfs.stats`: `http_requests` (requests sent on
the wire, retries included), `http_failures` (5xx/408/429 answers, connection errors and
timeouts, bodies broken mid-stream) and `retries` (requests object_store sent again after such
a failure: at most 4 per operation, within 30 s). Each measurement is printed and appended to
.cache/remote-stats.jsonl. The tests assert:
  - transient faults: a `cp -r` of two arrays while every 4th GET fails (the first fault drops
    the connection, the second truncates a body, the others answer 503; a request target is
    failed at most once, so no operation can exhaust its retries) copies exactly the
    independent parser's chunk files, and over the copy
        retries == http_failures == faults injected,  http_requests == requests the proxy saw;
  - faults on pinned reads: with --prefetch-size 0 chunk files are ranged GETs with If-Match;
    the first of each shard fails (drop, truncate, then 503s): the same counts hold, each is
    retried with the same If-Match, and the truncated body resumes where it broke;
  - a persistent fault: while one shard object always answers 503, reading a chunk file of
    that shard fails with EIO within seconds, after 1 + 4 requests for the object (failures +5,
    retries +4); chunk files of the other shards still read fine, without failures; once the
    fault clears the same chunk file reads as written;
  - the first read after such an outage is a new request: no failure, no retry.
"""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import hmac
import os
import re
import socket
import subprocess
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import seed_remote as SR
import shardindex as si
from helpers import pread_in_child, walk_files
from remote import delta, record, remote, remote_view, stats  # noqa: F401 - fixtures

COPIED = ["ts/u8_2d_end_crc_blosc", "ts/u8_2d_many_files_dot"]
PERSISTENT = "ts/u8_2d_end_crc_blosc"
MAX_RETRIES = 4           # src/store/remote.rs: RetryConfig { max_retries: 4, .. }
FAIL_WITHIN = 15          # seconds: 4 backoffs from 0.1 s, at most doubling, sum < 1.6 s

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message>"
             b"<RequestId>zarrfs-fault-proxy</RequestId></Error>")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
              "transfer-encoding", "te", "trailer", "upgrade"}


# ---------------------------------------------------------------------------------------------
# the proxy


@dataclass
class Seen:
    """One request as the proxy received it, and what became of it."""
    method: str
    target: str                   # path and query, as sent
    key: str                      # the path without query, percent-decoded
    headers: dict                 # lower-case name -> value
    fault: str | None = None      # "503", "drop", "truncate"; None: moto's answer as it was
    status: int | None = None     # the status the client got (None: no response)
    body_sent: int | None = None  # body bytes the client got
    upstream_error: str | None = None

    @property
    def object_get(self) -> bool:
        """A GET of an object (a listing is a GET of the bucket with a query)."""
        return self.method == "GET" and "?" not in self.target

    def signature_valid(self, secret: str) -> bool:
        """The request's SigV4 signature is right for exactly what the proxy forwards (method,
        path and query, the signed headers, Host included). moto accepts any signature, so
        this is what shows that the forwarding keeps requests valid for a real S3."""
        m = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=[^/]+/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                         r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})",
                         self.headers.get("authorization", ""))
        if not m:
            return False
        date, region, service, signed, signature = m.groups()
        path, _, query = self.target.partition("?")
        # SigV4 encodes the query strictly (a space is %20), whatever the client sent ('+').
        strict = lambda s: urllib.parse.quote(urllib.parse.unquote_plus(s), safe="-_.~")  # noqa: E731
        pairs = sorted((strict(k), strict(v)) for k, _, v in (p.partition("=") for p in query.split("&") if p))
        names = signed.split(";")
        if any(n not in self.headers for n in names):
            return False
        canonical = "\n".join([
            self.method, path, "&".join(f"{k}={v}" for k, v in pairs),
            "".join(f"{n}:{self.headers[n].strip()}\n" for n in names), signed,
            self.headers.get("x-amz-content-sha256", "UNSIGNED-PAYLOAD")])
        scope = f"{date}/{region}/{service}/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", self.headers.get("x-amz-date", ""), scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        key = f"AWS4{secret}".encode()
        for part in (date, region, service, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        return hmac.compare_digest(
            hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), signature)


class FaultProxy:
    """A threaded HTTP proxy to one upstream server that injects the faults its policy picks.

    A policy has plan(seen) -> fault or None (called under the proxy's lock, in arrival order)
    and declined(seen, fault), told when a planned "truncate" could not be done (the answer had
    no body to cut); then the request was answered as it was and counts as no fault."""

    def __init__(self, upstream: str):
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.lock = threading.Lock()
        self.seen: list[Seen] = []
        self.policy = None
        self.inflight = 0
        self.last_activity = time.monotonic()
        self._connections: set[socket.socket] = set()
        self._handlers: set[threading.Thread] = set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.proxy = self
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy",
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> "FaultProxy":
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, end the open connections and wait for every thread."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)
        with self.lock:
            conns, handlers = list(self._connections), list(self._handlers)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in handlers:
            t.join(5)
        alive = [t.name for t in [self._thread, *handlers] if t.is_alive()]
        assert not alive, f"fault proxy threads still running: {alive}"

    # -- faults and measurements

    def arm(self, policy) -> None:
        with self.lock:
            self.policy = policy

    def disarm(self) -> None:
        self.arm(None)

    def settle(self, quiet: float = 0.4, timeout: float = 30) -> None:
        """Wait until no request is in flight and none arrived for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                idle = self.inflight == 0 and time.monotonic() - self.last_activity >= quiet
            if idle:
                return
            time.sleep(0.05)
        raise AssertionError(f"requests still arriving at the proxy after {timeout} s")

    # -- one request (called by the handler thread)

    def handle(self, h: "_Handler") -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        req = Seen(h.command, h.path, urllib.parse.unquote(h.path.partition("?")[0]),
                   {k.lower(): v for k, v in h.headers.items()})
        with self.lock:
            self.inflight += 1
            self.last_activity = time.monotonic()
            self.seen.append(req)
            req.fault = self.policy.plan(req) if self.policy else None
        try:
            self._answer(h, req, body)
        finally:
            with self.lock:
                self.inflight -= 1
                self.last_activity = time.monotonic()

    def _answer(self, h: "_Handler", req: Seen, body: bytes) -> None:
        if req.fault == "drop":
            self._hang_up(h)
            return
        if req.fault == "503":
            self._send(h, req, 503, "Slow Down",
                       [("Content-Type", "application/xml"),
                        ("Content-Length", str(len(SLOW_DOWN)))], SLOW_DOWN)
            return
        try:
            status, reason, headers, data = self._forward(h, req, body)
        except OSError as e:  # moto unreachable: a 502 the test sees as upstream_error
            req.upstream_error = f"{type(e).__name__}: {e}"
            status, reason, headers, data = 502, "Bad Gateway", [("Content-Length", "0")], b""
        if req.fault == "truncate" and (status not in (200, 206) or len(data) < 2):
            with self.lock:
                if self.policy:
                    self.policy.declined(req, req.fault)
                req.fault = None
        if req.fault == "truncate":
            self._send(h, req, status, reason, headers, data[:len(data) // 2])
            self._hang_up(h)
        else:
            self._send(h, req, status, reason, headers, data)

    def _forward(self, h: "_Handler", req: Seen, body: bytes):
        conn = HTTPConnection(*self.upstream, timeout=60)
        try:
            # Host and Authorization go as the client sent them: the signature covers them.
            conn.putrequest(h.command, h.path, skip_host=True, skip_accept_encoding=True)
            for k, v in h.headers.items():
                if k.lower() not in HOP_BY_HOP:
                    conn.putheader(k, v)
            conn.endheaders(body or None)
            res = conn.getresponse()
            data = res.read()  # empty for HEAD
            headers = [(k, v) for k, v in res.getheaders() if k.lower() not in HOP_BY_HOP]
            if h.command != "HEAD":  # a chunked answer was decoded: send its real length
                headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
                headers.append(("Content-Length", str(len(data))))
            return res.status, res.reason, headers, data
        finally:
            conn.close()

    @staticmethod
    def _send(h: "_Handler", req: Seen, status: int, reason: str, headers, data: bytes) -> None:
        req.status = status
        req.body_sent = 0 if h.command == "HEAD" else len(data)
        h.send_response_only(status, reason)
        for k, v in headers:
            h.send_header(k, v)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
        h.wfile.flush()

    @staticmethod
    def _hang_up(h: "_Handler") -> None:
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the daemon's connection pool expects

    def setup(self):
        super().setup()
        with self.server.proxy.lock:
            self.server.proxy._connections.add(self.connection)
            self.server.proxy._handlers.add(threading.current_thread())

    def finish(self):
        with self.server.proxy.lock:
            self.server.proxy._connections.discard(self.connection)
        super().finish()

    def _any(self):
        self.server.proxy.handle(self)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PROPFIND = _any

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


class TransientFaults:
    """Every `every`-th GET (of those `only` accepts) fails: the first fault drops the
    connection, the second truncates an object's body, the others answer 503. A request target
    (path and query) is failed at most once, and requests for a target already failed are not
    counted, so an operation (one target) sees at most one fault and gets over it with a single
    retry: none can exhaust its retries, whatever the order concurrent requests arrive in."""

    def __init__(self, every: int = 4, first: tuple = ("drop", "truncate"), only=None):
        self.every = every
        self.only = only or (lambda req: True)
        self.pending = list(first)
        self.failed: set[str] = set()
        self.gets = 0

    def plan(self, req: Seen) -> str | None:
        if req.method != "GET" or req.target in self.failed or not self.only(req):
            return None
        self.gets += 1
        if self.gets % self.every:
            return None
        # a listing's body is read whole, outside object_store's retry: only objects get cut
        fault = next((f for f in self.pending if f != "truncate" or req.object_get), "503")
        if fault in self.pending:
            self.pending.remove(fault)
        self.failed.add(req.target)
        return fault

    def declined(self, req: Seen, fault: str) -> None:
        self.failed.discard(req.target)
        self.gets -= 1  # the next GET takes the slot
        self.pending.insert(0, fault)


class FailObject:
    """Every request for one object answers 503 (an outage of one key)."""

    def __init__(self, key: str):
        self.key = key

    def plan(self, req: Seen) -> str | None:
        return "503" if req.key == self.key else None

    def declined(self, req: Seen, fault: str) -> None:
        pass


@pytest.fixture
def fault_proxy(remote):
    """A FaultProxy in front of moto, closed (threads joined) after the test's mounts."""
    remote.ensure("s3")
    proxy = FaultProxy(SR.endpoint("s3")).start()
    yield proxy
    proxy.close()


# ---------------------------------------------------------------------------------------------
# helpers


def mount_through(remote_view, proxy: FaultProxy, *options: str):
    view = remote_view("s3", "--read-only", "--endpoint-url", proxy.url, *options)
    assert proxy.seen, "mounting sent no request through the proxy: --endpoint-url ignored?"
    return view


def measure(view, proxy: FaultProxy) -> tuple[dict, int]:
    """(the daemon's counters, requests the proxy has seen) at a moment with nothing in flight
    (the proxy saw nothing arrive while the counters were read)."""
    for _ in range(10):
        proxy.settle()
        n = len(proxy.seen)
        s = stats(view)
        if len(proxy.seen) == n:
            return s, n
    raise AssertionError("the daemon kept sending requests")


def warm_metadata(view, path: str) -> None:
    """What any client reads first: the array directory and its zarr.json."""
    os.stat(view.path(path))
    assert (view.path(path) / "zarr.json").read_bytes()


def copy_arrays(view, paths: list[str], dest) -> float:
    """`cp -r` of each array out of the view into dest/<path>; returns the seconds taken."""
    t0 = time.monotonic()
    for path in paths:
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["cp", "-r", str(view.path(path)), str(dest / path)],
                             capture_output=True, text=True, timeout=240)
        assert res.returncode == 0, f"cp -r {path} failed: {res.stderr}"
    return time.monotonic() - t0


def assert_copies(tree, paths: list[str], dest) -> None:
    """Each copy holds exactly the independent parser's chunk files, byte for byte."""
    for path in paths:
        copied = {k: p.read_bytes() for k, p in walk_files(dest / path).items() if k != "zarr.json"}
        assert copied == si.expected_chunk_files(si.load_layout(tree.root / path)), \
            f"the copy of {path} is not the parser's chunk files"


def check_forwarding(window: list[Seen], proxy: FaultProxy) -> None:
    """Requests (the mount's included) went to the proxy's address (Host) with a SigV4
    signature valid for what the proxy forwarded to moto, and moto answered every one."""
    bad_host = {r.headers.get("host") for r in window} - {f"127.0.0.1:{proxy.port}"}
    assert not bad_host, f"requests with Host {bad_host}, not the proxy's address"
    invalid = [r.target for r in window if not r.signature_valid(SR.AWS_SECRET)]
    assert not invalid, f"{len(invalid)} requests without a valid SigV4 signature: {invalid[:3]}"
    moved = dataclasses.replace(window[0], headers={**window[0].headers,
                                                    "host": SR.endpoint("s3").split("//")[1]})
    assert not moved.signature_valid(SR.AWS_SECRET), "the check would pass a rewritten Host"
    errors = [(r.target, r.upstream_error) for r in window if r.upstream_error]
    assert not errors, f"moto did not answer the proxy: {errors[:3]}"


def fault_summary(window: list[Seen]) -> dict:
    """What was injected, on which kinds of request."""
    faults = [r for r in window if r.fault]
    return {
        "by_kind": dict(Counter(r.fault for r in faults)),
        "on_lists": sum(not r.object_get for r in faults),
        "on_ranged_gets": sum(r.object_get and "range" in r.headers for r in faults),
        "on_if_match_gets": sum(r.object_get and "if-match" in r.headers for r in faults),
    }


def resumptions(window: list[Seen]) -> list[dict]:
    """For each truncated answer, the request that came next for the same target: object_store
    resumes a broken body with a ranged GET of the rest (same preconditions)."""
    out = []
    for i, r in enumerate(window):
        if r.fault == "truncate":
            nxt = next((x for x in window[i + 1:] if x.target == r.target), None)
            out.append({"range": r.headers.get("range"), "cut_after": r.body_sent,
                        "if_match": r.headers.get("if-match"),
                        "resumed_range": nxt and nxt.headers.get("range"),
                        "resumed_if_match": nxt and nxt.headers.get("if-match")})
    return out


def assert_every_fault_retried(window: list[Seen], d: dict) -> int:
    """Each failed request was sent again (seen by the proxy), and the daemon's counters match
    the proxy's: every request, every fault, one retry per fault. Returns the faults."""
    injected = sum(r.fault is not None for r in window)
    again = [r.target for i, r in enumerate(window)
             if r.fault and not any(x.target == r.target for x in window[i + 1:])]
    assert not again, f"failed requests never sent again: {again[:3]}"
    assert d["http_requests"] == len(window), \
        f"http_requests +{d['http_requests']}, the proxy saw {len(window)} ({d})"
    assert d["http_failures"] == injected, \
        f"http_failures +{d['http_failures']}, injected {injected} ({d})"
    assert d["retries"] == injected, f"retries +{d['retries']}, injected {injected} ({d})"
    return injected


@dataclass
class Outage:
    """One shard object of PERSISTENT that will always answer 503, a chunk file inside it, and
    the chunk files of another shard."""
    object_key: str                  # the request path of the shard object
    shard: str                       # its key relative to the array
    file: str                        # a chunk file of the view inside that shard
    data: bytes
    elsewhere: list[tuple[str, bytes]] = field(default_factory=list)

    def read(self, view, proxy: FaultProxy) -> tuple[dict, float, dict, list[Seen]]:
        """pread of the chunk file in a child (bounded): (result, seconds, counters' delta,
        requests the proxy saw)."""
        s0, n0 = measure(view, proxy)
        t0 = time.monotonic()
        got = pread_in_child(view.path(PERSISTENT) / self.file, len(self.data), 0, timeout=40)
        took = time.monotonic() - t0
        s1, n1 = measure(view, proxy)
        return got, took, delta(s0, s1), proxy.seen[n0:n1]


def plan_outage(tree, remote) -> Outage:
    layout = si.load_layout(tree.root / PERSISTENT)
    assert len(layout.levels) == 1, "the outage tests read a singly sharded array"
    shards = si.stored_shards(layout)
    per_shard = [s // c for s, c in zip(layout.chunk_shape, layout.inner_shape)]
    files: dict[tuple, list[tuple[str, bytes]]] = {}
    for coords, data in sorted(si.inner_chunks(layout).items()):
        shard = tuple(c // n for c, n in zip(coords, per_shard))
        files.setdefault(shard, []).append((si.chunk_key(coords, layout.cke), data))
    bad, good = min(shards), max(shards)
    assert bad != good and files[bad] and files[good]
    rel = shards[bad].relative_to(tree.root / PERSISTENT).as_posix()
    key = f"/{SR.BUCKET}/{SR.join_key(remote.view_prefix('s3'), PERSISTENT)}/{rel}"
    return Outage(key, rel, *files[bad][0], elsewhere=files[good])


# ---------------------------------------------------------------------------------------------
# tests


def test_transient_faults_are_retried(fault_proxy, remote_view, tree, tmp_path):
    """cp -r of two arrays while every 4th GET fails (listings included)."""
    view = mount_through(remote_view, fault_proxy)
    for path in COPIED:
        warm_metadata(view, path)
    s0, n0 = measure(view, fault_proxy)
    fault_proxy.arm(TransientFaults(every=4))
    took = copy_arrays(view, COPIED, tmp_path / "copy")
    s1, n1 = measure(view, fault_proxy)
    fault_proxy.disarm()
    window, d = fault_proxy.seen[n0:n1], delta(s0, s1)
    summary = fault_summary(window)
    record("transient faults", backend="s3", arrays=COPIED, seconds=round(took, 2),
           proxy_requests=len(window), proxy_gets=sum(r.method == "GET" for r in window),
           injected=sum(r.fault is not None for r in window), faults=summary,
           resumed=resumptions(window), copy=d)

    check_forwarding(fault_proxy.seen, fault_proxy)
    assert_copies(tree, COPIED, tmp_path / "copy")
    assert summary["by_kind"].get("drop") == 1 and summary["by_kind"].get("truncate") == 1, \
        f"the planned faults were not all injected: {summary}"
    assert summary["by_kind"].get("503", 0) >= 5, f"too few 503s injected: {summary}"
    assert_every_fault_retried(window, d)
    assert view.alive()


def test_faults_on_pinned_reads_are_retried(fault_proxy, remote_view, tree, tmp_path):
    """With --prefetch-size 0 chunk files are read by ranged GETs pinned to the shard's ETag
    (If-Match): the first pinned GET of every shard fails (a dropped connection, a truncated
    body, then 503s), and is retried with the same precondition."""
    view = mount_through(remote_view, fault_proxy, "--prefetch-size", "0")
    warm_metadata(view, PERSISTENT)
    s0, n0 = measure(view, fault_proxy)
    fault_proxy.arm(TransientFaults(every=1, only=lambda r: "if-match" in r.headers))
    took = copy_arrays(view, [PERSISTENT], tmp_path / "copy")
    s1, n1 = measure(view, fault_proxy)
    fault_proxy.disarm()
    window, d = fault_proxy.seen[n0:n1], delta(s0, s1)
    summary, resumed = fault_summary(window), resumptions(window)
    record("faults on pinned reads", backend="s3", array=PERSISTENT, seconds=round(took, 2),
           proxy_requests=len(window), if_match_gets=sum("if-match" in r.headers for r in window),
           injected=sum(r.fault is not None for r in window), faults=summary, resumed=resumed,
           copy=d)

    check_forwarding(fault_proxy.seen, fault_proxy)
    assert_copies(tree, [PERSISTENT], tmp_path / "copy")
    shards = len(si.stored_shards(si.load_layout(tree.root / PERSISTENT)))
    assert summary["on_if_match_gets"] == shards, f"one fault per shard expected: {summary}"
    assert summary["by_kind"].get("drop") == 1 and summary["by_kind"].get("truncate") == 1, summary
    # the rest of a broken body is asked for from where it broke, under the same precondition
    (cut,) = resumed
    start, _, end = cut["range"].removeprefix("bytes=").partition("-")
    assert cut["resumed_range"] == f"bytes={int(start) + cut['cut_after']}-{end}", cut
    assert cut["resumed_if_match"] == cut["if_match"], cut
    assert_every_fault_retried(window, d)
    assert view.alive()


def test_persistent_fault_fails_with_eio(fault_proxy, remote_view, remote, tree):
    """One shard object always answers 503: its chunk file fails with EIO after 1 + 4 requests
    and within seconds; the other shards' chunk files read fine meanwhile; once the outage
    ends, the failed file reads as written."""
    outage = plan_outage(tree, remote)
    view = mount_through(remote_view, fault_proxy)
    warm_metadata(view, PERSISTENT)
    fault_proxy.arm(FailObject(outage.object_key))
    got, took, d_fail, failing = outage.read(view, fault_proxy)
    to_object = [r for r in failing if r.key == outage.object_key]

    s1, n1 = measure(view, fault_proxy)
    for name, data in outage.elsewhere:
        assert (view.path(PERSISTENT) / name).read_bytes() == data, f"bytes of {name}"
    s2, n2 = measure(view, fault_proxy)
    d_good, others = delta(s1, s2), fault_proxy.seen[n1:n2]

    fault_proxy.disarm()
    again = pread_in_child(view.path(PERSISTENT) / outage.file, len(outage.data), 0, timeout=40)
    record("persistent fault", backend="s3", array=PERSISTENT, shard=outage.shard,
           file=outage.file, seconds=round(took, 2), result=got.get("error", "read"),
           requests_for_object=[f"{r.method} {r.headers.get('range')}" for r in to_object],
           failing_read=d_fail, other_shard_reads=d_good)

    check_forwarding(fault_proxy.seen, fault_proxy)
    assert got.get("errno") == errno.EIO, f"reading {outage.file} during the outage: {got}"
    assert took < FAIL_WITHIN, f"the failing read took {took:.1f} s"
    assert [r.fault for r in to_object] == ["503"] * (1 + MAX_RETRIES), \
        f"requests for {outage.shard}: {[(r.method, r.fault) for r in to_object]}"
    assert d_fail["http_requests"] == len(failing), (d_fail, len(failing))
    assert d_fail["http_failures"] == 1 + MAX_RETRIES, d_fail
    assert d_fail["retries"] == MAX_RETRIES, d_fail
    assert not any(r.fault for r in others), "chunk files of another shard met the outage"
    assert d_good["http_requests"] == len(others), (d_good, len(others))
    assert d_good["http_failures"] == 0 and d_good["retries"] == 0, d_good
    assert again.get("ok") == outage.data, f"reading {outage.file} after the outage: {again}"
    assert view.alive()


def test_first_read_after_an_outage_is_no_retry(fault_proxy, remote_view, remote, tree):
    """A read given up on (retries exhausted) is not retried later: the first read of the same
    object once the outage is over is a new request, neither a failure nor a retry."""
    outage = plan_outage(tree, remote)
    view = mount_through(remote_view, fault_proxy)
    warm_metadata(view, PERSISTENT)
    fault_proxy.arm(FailObject(outage.object_key))
    got, _, d_fail, _ = outage.read(view, fault_proxy)
    assert got.get("errno") == errno.EIO, got
    fault_proxy.disarm()
    again, _, d_after, after = outage.read(view, fault_proxy)
    record("read after an outage", backend="s3", array=PERSISTENT, file=outage.file,
           failing_read=d_fail, read_after=d_after, requests_after=len(after))
    assert again.get("ok") == outage.data, f"reading {outage.file} after the outage: {again}"
    assert not any(r.fault for r in after)
    assert d_after["http_requests"] == len(after), (d_after, len(after))
    assert d_after["http_failures"] == 0, d_after
    assert d_after["retries"] == 0, \
        f"a fresh read after the outage counted as a retry of a request given up on: {d_after}"
