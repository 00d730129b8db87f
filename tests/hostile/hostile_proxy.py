#!/usr/bin/env python3
"""hostile-proxy: an API server that lies, for tests/e2e/test_hostile.sh.

It sits in front of kube-lite (plain HTTP on loopback), forwards every
request unchanged, and corrupts a random share of the answers: errors
(500/503/429 with and without Retry-After, 409), connections reset mid-body,
truncated bodies, invalid UTF-8 inside strings, values of the wrong JSON
type at random paths of objects, list items and watch events, a list whose
`items` is not an array, watch events that are not objects, of an unknown
type or an ERROR with a bogus Status, duplicated keys, huge (2 MiB) strings,
and answers or streams that stall.

Every API group is fair game, custom resources included: answers about the
COSI objects (/apis/objectstorage.k8s.io/...) meet the same fates, and
wrong types there also go to the fields the COSI binaries read (the Bucket's
claim reference, driver name and deletion policy, the claim's and access's
status, the classes' driver and parameters), as they go to the fields
csi-snapshotter reads on VolumeSnapshotContents and classes
(/apis/snapshot.storage.k8s.io/...) and csi-resizer on claims and PVs (the
requested and allocated sizes, conditions, the PV's capacity and volume
handle). The counts at the end say how many mutations each API group and
each client (User-Agent) got.

Writes reach kube-lite as they were sent (an injected error may stand in for
the answer, before or after the write happened), so the store stays sane and
the world can converge once the lies stop.

Watch answers are streamed event by event as kube-lite writes them, never
buffered beyond one event.

Determinism: every decision about a request is drawn from a generator seeded
with (seed, method, path, how many times this method+path was seen), so the
n-th GET of a path meets the same fate in a replay with the same seed even
though threads interleave differently. The seed is printed at start.

Scripted lies (--script): a JSON list of rules {"method", "path" (a regex
searched in the URL path), "nth" (1: the first matching request), "do":
"refuse" (a 409 Conflict before kube-lite sees the request), "fail-after"
(a 500 once kube-lite made the write) or "wrongtype"
with "at" (a dotted path of the answer, set to a number)}; a rule of method
"WATCH" is about watch events instead: "match" is a text the event's line
holds, and "wrongtype" changes that event. Each rule fires
once, on its nth match, whatever --scale says; with --scale 0 the proxy tells
only these lies, so a test can replay one sequence of them exactly.

Signals: SIGUSR1 switches to pass-through for good (stalls end at once, every
open watch is ended as a restarting API server would, and the counts of what
was done are printed); SIGTERM/SIGINT print the counts and exit 0.

Python (stdlib only) rather than C: the job is JSON surgery at random paths
plus byte-level damage to the text, which is a few lines each here; the proxy
is not what is under test, and ASan has nothing to say about it.
"""

import argparse
import collections
import http.client
import http.server
import json
import random
import re
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse

# Probability of each corruption, per answer (per event for watch streams).
DEFAULTS = {
    "error": 0.05,  # 500/503/429 (+/- Retry-After) or 409 instead of the answer
    "reset": 0.02,  # TCP reset part-way through the body
    "truncate": 0.02,  # a well-framed body that ends early
    "badutf8": 0.03,  # invalid UTF-8 bytes inside a string
    "wrongtype": 0.08,  # a value of another JSON type at a random path
    "items": 0.02,  # a list's items not an array
    "badevent": 0.03,  # an event that is not an object, of an unknown type, or a bogus ERROR
    "duplicate": 0.03,  # a key twice, the second time with another type
    "huge": 0.01,  # a 2 MiB string
    "stall": 0.01,  # the answer (or the stream) stops for a while
    "split": 0.10,  # an event split across chunks (legal, but exercises the decoder)
}
STALL_MAX = 12.0  # seconds
HUGE = 2 << 20
UPSTREAM_TIMEOUT = 60

log_lock = threading.Lock()


def log(msg):
    with log_lock:
        sys.stdout.write("hostile-proxy: %s\n" % msg)
        sys.stdout.flush()


class State:
    """What every handler thread shares: configuration, mode, counts."""

    def __init__(self, upstream, seed, probs, spare, script=()):
        self.upstream = upstream  # (host, port)
        self.script = [dict(r, seen=0, compiled=re.compile(r["path"])) for r in script]
        self.spare = spare  # compiled regex of paths never corrupted, or None
        self.seed = seed
        self.probs = probs
        self.passthrough = threading.Event()
        self.lock = threading.Lock()
        self.seen = collections.Counter()  # method+path -> requests so far
        self.counts = collections.Counter()  # mutation kind -> times applied
        self.by_group = collections.defaultdict(collections.Counter)  # API group -> kind -> times
        self.by_agent = collections.Counter()  # client (User-Agent up to '/') -> mutations
        self.requests = 0
        self.streams = set()  # upstream sockets of open watches

    def scripted(self, method, path, line=""):
        """The script's rule for this request (or watch event line), if one fires now."""
        with self.lock:
            for r in self.script:
                if r["method"] == method and r["compiled"].search(path) and r.get("match", "") in line:
                    r["seen"] += 1
                    if r["seen"] == r.get("nth", 1):
                        return r
        return None

    def rng_for(self, method, path):
        with self.lock:
            key = method + " " + path
            n = self.seen[key]
            self.seen[key] += 1
            self.requests += 1
        return random.Random("%d|%s|%d" % (self.seed, key, n))

    def count(self, kind, group="", agent=""):
        with self.lock:
            self.counts[kind] += 1
            self.by_group[group or "?"][kind] += 1
            self.by_agent[agent or "?"] += 1

    def report(self):
        with self.lock:
            parts = ["%s=%d" % kv for kv in sorted(self.counts.items())]
            total = sum(self.counts.values())
            log("requests=%d mutations=%d %s" % (self.requests, total, " ".join(parts)))
            for g in sorted(self.by_group):
                c = self.by_group[g]
                log("group %s: mutations=%d %s" % (g, sum(c.values()), " ".join("%s=%d" % kv for kv in sorted(c.items()))))
            log("by client: " + " ".join("%s=%d" % kv for kv in sorted(self.by_agent.items())))

    def go_passthrough(self):
        self.passthrough.set()
        with self.lock:
            socks = list(self.streams)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        log("pass-through from now on (%d watches ended)" % len(socks))
        self.report()


# ---- JSON surgery ----------------------------------------------------------------------

INTERESTING = [
    ("metadata",),
    ("metadata", "finalizers"),
    ("metadata", "annotations"),
    ("metadata", "labels"),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),
    ("metadata", "resourceVersion"),
    ("metadata", "deletionTimestamp"),
    ("metadata", "ownerReferences"),
    ("spec",),
    ("status",),
    ("kind",),
    ("apiVersion",),
]
# The fields of the COSI objects (objectstorage.k8s.io) that the controller and
# the sidecar decide on; tried on answers about those objects only (a path
# whose parent object is missing in the document is not tried).
COSI_INTERESTING = [
    ("spec", "driverName"),
    ("spec", "bucketClassName"),
    ("spec", "bucketClaim"),
    ("spec", "bucketClaim", "name"),
    ("spec", "bucketClaim", "namespace"),
    ("spec", "bucketClaim", "uid"),
    ("spec", "deletionPolicy"),
    ("spec", "parameters"),
    ("spec", "protocols"),
    ("spec", "existingBucketID"),
    ("spec", "bucketClaimName"),
    ("spec", "bucketAccessClassName"),
    ("spec", "credentialsSecretName"),
    ("spec", "protocol"),
    ("status", "bucketReady"),
    ("status", "bucketName"),
    ("status", "bucketID"),
    ("status", "accountID"),
    ("status", "accessGranted"),
    ("driverName",),
    ("deletionPolicy",),
    ("authenticationType",),
    ("parameters",),
]
# The fields of VolumeSnapshotContents and VolumeSnapshotClasses that
# csi-snapshotter decides on.
SNAPSHOT_INTERESTING = [
    ("spec", "driver"),
    ("spec", "deletionPolicy"),
    ("spec", "source"),
    ("spec", "source", "volumeHandle"),
    ("spec", "source", "snapshotHandle"),
    ("spec", "volumeSnapshotClassName"),
    ("spec", "volumeSnapshotRef"),
    ("spec", "volumeSnapshotRef", "uid"),
    ("status", "readyToUse"),
    ("status", "snapshotHandle"),
    ("status", "error"),
    ("status", "creationTime"),
    ("status", "restoreSize"),
    ("driver",),
    ("deletionPolicy",),
    ("parameters",),
]
# The fields of claims and PVs that csi-resizer decides on (tried on every
# core answer whose parent object is there).
RESIZE_INTERESTING = [
    ("spec", "resources", "requests"),
    ("spec", "resources", "requests", "storage"),
    ("spec", "volumeName"),
    ("status", "capacity"),
    ("status", "allocatedResources"),
    ("status", "allocatedResourceStatuses"),
    ("status", "conditions"),
    ("spec", "capacity", "storage"),
    ("spec", "csi", "volumeHandle"),
    ("spec", "claimRef", "uid"),
]
EXTRA_BY_GROUP = {
    "objectstorage.k8s.io": COSI_INTERESTING,
    "snapshot.storage.k8s.io": SNAPSHOT_INTERESTING,
    "core": RESIZE_INTERESTING,
}
LIST_INTERESTING = [("items",), ("metadata",), ("metadata", "resourceVersion"), ("kind",)]
EVENT_INTERESTING = [("type",), ("object",)]


def other_value(v, rng):
    """A value of another JSON type than v."""
    choices = [
        "hostile",
        "",
        0,
        -1,
        2**63,
        1e308,
        3.5,
        {},
        {"hostile": [1, None]},
        [],
        [1, "two", None, {}],
        None,
        True,
        False,
    ]

    def kind(x):
        if isinstance(x, bool):
            return "bool"
        if isinstance(x, (int, float)):
            return "number"
        return type(x).__name__

    pool = [c for c in choices if kind(c) != kind(v)]
    return rng.choice(pool)


def all_paths(v, prefix=(), depth=0, out=None):
    """Every path to a value inside v (not v itself), depth-limited."""
    if out is None:
        out = []
    if depth > 10:
        return out
    if isinstance(v, dict):
        for k, x in v.items():
            p = prefix + (k,)
            out.append(p)
            all_paths(x, p, depth + 1, out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            p = prefix + (i,)
            out.append(p)
            all_paths(x, p, depth + 1, out)
    return out


def get_at(v, path):
    for k in path:
        v = v[k]
    return v


def parent_of(v, path):
    """The container holding path's last step, or None when a step is missing."""
    for k in path[:-1]:
        if isinstance(v, dict) and k in v:
            v = v[k]
        elif isinstance(v, list) and isinstance(k, int) and k < len(v):
            v = v[k]
        else:
            return None
    return v


def pick_path(doc, rng, interesting, extra=()):
    """A path in doc: one of the interesting ones (prefixed by a random list
    item or the event's object; with extra, also those of extra whose parent
    is there) or any path at all."""
    prefixes = [()]
    if isinstance(doc, dict):
        if isinstance(doc.get("items"), list) and doc["items"]:
            prefixes.append(("items", rng.randrange(len(doc["items"]))))
        if isinstance(doc.get("object"), dict):
            prefixes.append(("object",))
    if rng.random() < 0.6:
        pre = rng.choice(prefixes)
        pool = INTERESTING if pre else interesting
        if extra and (pre or interesting is INTERESTING):
            pool = INTERESTING + [p for p in extra if isinstance(parent_of(doc, pre + p), dict)]
        path = pre + rng.choice(pool)
        par = parent_of(doc, path)
        if isinstance(par, dict):
            return path
    paths = all_paths(doc)
    return rng.choice(paths) if paths else None


def describe(path):
    return ".".join("[%d]" % p if isinstance(p, int) else p for p in path) or "(top)"


class Body:
    """A JSON document on its way out, with damage that json.dumps cannot
    express (duplicate keys, invalid UTF-8) applied to its text."""

    def __init__(self, doc):
        self.doc = doc
        self.text_subs = []  # (marker string, bytes to put in its place)

    def marker(self, raw):
        m = "@@hostile%d@@" % len(self.text_subs)
        self.text_subs.append((m, raw))
        return m

    def encode(self):
        try:
            b = json.dumps(self.doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (kube-lite wrote it as a \ud800 escape): escaped again.
            b = json.dumps(self.doc, separators=(",", ":")).encode("ascii")
        for m, raw in self.text_subs:
            b = b.replace(json.dumps(m).encode(), raw)
            b = b.replace(m.encode(), raw)
        return b


def mutate_doc(body, kind, rng, interesting, extra=()):
    """Applies one mutation of kind to body.doc; returns what it did, or None."""
    doc = body.doc
    if kind == "wrongtype":
        path = pick_path(doc, rng, interesting, extra)
        if not path:
            return None
        par = parent_of(doc, path)
        if isinstance(par, dict):
            old = par.get(path[-1])
            par[path[-1]] = other_value(old, rng)
        elif isinstance(par, list) and path[-1] < len(par):
            par[path[-1]] = other_value(par[path[-1]], rng)
        else:
            return None
        return "wrong type at " + describe(path)
    if kind == "items":
        if not isinstance(doc, dict) or "items" not in doc:
            return None
        doc["items"] = rng.choice([None, {}, "items", 7, {"0": doc["items"][:1] if isinstance(doc["items"], list) else 0}])
        return "items not an array"
    if kind == "badutf8":
        strs = [p for p in all_paths(doc) if isinstance(get_at(doc, p), str)]
        if not strs:
            return None
        path = rng.choice(strs)
        raw = rng.choice([b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82", b"\x80"])
        par = parent_of(doc, path)
        par[path[-1]] = par[path[-1]] + body.marker(raw)
        return "invalid UTF-8 in " + describe(path)
    if kind == "duplicate":
        objs = [p for p in all_paths(doc) if isinstance(get_at(doc, p), dict) and get_at(doc, p)]
        target = get_at(doc, rng.choice(objs)) if objs and rng.random() < 0.7 else doc
        if not isinstance(target, dict) or not target:
            return None
        key = rng.choice(list(target.keys()))
        first, second = target[key], other_value(target[key], rng)
        if rng.random() < 0.5:
            first, second = second, first
        raw = (
            json.dumps(first, ensure_ascii=False, separators=(",", ":"))
            + ","
            + json.dumps(key, ensure_ascii=False)
            + ":"
            + json.dumps(second, ensure_ascii=False, separators=(",", ":"))
        ).encode("utf-8")
        target[key] = body.marker(raw)
        return "duplicate key %s" % key
    if kind == "huge":
        objs = [p for p in all_paths(doc) if isinstance(get_at(doc, p), dict)]
        target = get_at(doc, rng.choice(objs)) if objs else doc
        if not isinstance(target, dict):
            return None
        strs = [k for k, v in target.items() if isinstance(v, str)]
        key = rng.choice(strs) if strs and rng.random() < 0.5 else "hostileHuge"
        target[key] = "h" * HUGE
        return "2 MiB string at %s" % key
    return None


def wrong_type_at(raw, at):
    """The JSON text raw with the value at the dotted path `at` replaced by a number (a scripted lie)."""
    doc = json.loads(raw)
    *parents, last = at.split(".")
    node = doc
    for k in parents:
        node = node[k]
    node[last] = 12345
    return json.dumps(doc).encode()


def bad_event(rng):
    """A watch event the decoder must refuse without harm."""
    choice = rng.randrange(8)
    if choice == 0:
        return rng.choice([b"[1,2,3]", b'"ADDED"', b"42", b"null", b"true"])
    if choice == 1:
        return json.dumps({"type": "HOSTILE", "object": {"kind": "Nothing"}}).encode()
    if choice == 2:
        return json.dumps({"type": "ERROR", "object": {"code": "410", "reason": 7, "message": ["x"]}}).encode()
    if choice == 3:
        return json.dumps({"type": "ERROR", "object": "gone"}).encode()
    if choice == 4:
        return json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError"}}).encode()
    if choice == 5:
        return json.dumps({"type": "ADDED"}).encode()
    if choice == 6:
        return json.dumps({"type": "MODIFIED", "object": None}).encode()
    return json.dumps({"type": 3, "object": []}).encode()


def roll(probs, rng, kinds):
    """One kind among kinds, drawn by their probabilities, or None."""
    x = rng.random()
    for k in kinds:
        p = probs.get(k, 0.0)
        if x < p:
            return k
        x -= p
    return None


# ---- HTTP ----------------------------------------------------------------------------------

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server", "host", "te", "trailer", "upgrade", "expect"}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hostile-proxy"
    st = None  # State, set in main
    rule = None  # the script's rule for the request at hand

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.proxy()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def read_request_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def reset(self):
        """Ends the connection with a TCP RST instead of a FIN."""
        try:
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close_connection = True
        try:
            self.connection.close()
        except OSError:
            pass

    def note(self, kind):
        """Counts one mutation of this request's answer."""
        self.st.count(kind, self.group, self.agent)

    def stall(self, rng, what):
        secs = rng.uniform(1.0, STALL_MAX)
        self.note("stall")
        log("stall %.1fs: %s %s (%s)" % (secs, self.command, self.path, what))
        self.st.passthrough.wait(secs)

    def send_status(self, code, reason, message):
        """A Status answer of the API's shape."""
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_error_answer(self, rng, when):
        code = rng.choice([500, 503, 429, 429, 409])
        reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests", 409: "Conflict"}[code]
        body = json.dumps(
            {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "hostile-proxy says no", "reason": reason, "code": code}
        ).encode()
        self.send_response(code)
        if code != 409 and rng.random() < 0.5:
            self.send_header("Retry-After", rng.choice(["1", "2", "0", "30", "99999", "soon", "-5"]))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.note("error")
        log("error %d (%s): %s %s" % (code, when, self.command, self.path))

    def proxy(self):
        st = self.st
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.split("/")
        self.group = "core" if parts[1:2] == ["api"] else parts[2] if parts[1:2] == ["apis"] and len(parts) > 2 else "other"
        self.agent = (self.headers.get("User-Agent") or "").split("/")[0]
        self.extra = EXTRA_BY_GROUP.get(self.group, ())
        q = urllib.parse.parse_qs(url.query)
        watching = q.get("watch", ["false"])[0] in ("1", "true")
        rng = st.rng_for(self.command, url.path + ("?watch" if watching else ""))
        try:
            req_body = self.read_request_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        hostile = not st.passthrough.is_set() and not (st.spare and st.spare.search(url.path))
        self.rule = st.scripted(self.command, url.path) if not watching else None
        if self.rule and self.rule["do"] == "refuse":
            self.send_status(409, "Conflict", "hostile-proxy says no (scripted)")
            self.note("scripted")
            log("scripted 409 (not forwarded): %s %s" % (self.command, self.path))
            return

        if hostile and rng.random() < st.probs["error"] and rng.random() < 0.5:
            # Refused before kube-lite saw it.
            self.send_error_answer(rng, "not forwarded")
            return

        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        up = http.client.HTTPConnection(*st.upstream, timeout=None if watching else UPSTREAM_TIMEOUT)
        try:
            up.request(self.command, self.path, body=req_body if req_body or self.command in ("POST", "PUT", "PATCH") else None, headers=headers)
            resp = up.getresponse()
            if watching and resp.status == 200:
                self.stream(up, resp, rng, hostile)
            else:
                self.answer(resp, rng, hostile)
        except (OSError, http.client.HTTPException) as e:
            if not self.wfile.closed:
                try:
                    self.send_response(502)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    self.close_connection = True
            log("upstream %s %s: %s" % (self.command, self.path, e))
        finally:
            up.close()

    def pass_headers(self, resp, length=None, chunked=False):
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def answer(self, resp, rng, hostile):
        """A whole answer: read, maybe corrupted, sent with a Content-Length."""
        st = self.st
        raw = resp.read()
        if self.rule and self.rule["do"] == "fail-after":
            self.send_status(500, "InternalError", "hostile-proxy says no (scripted, after the write)")
            self.note("scripted")
            log("scripted 500 (after the write): %s %s" % (self.command, self.path))
            return
        if self.rule and self.rule["do"] == "wrongtype":
            raw = wrong_type_at(raw, self.rule["at"])
            self.note("scripted")
            log("scripted wrong type at %s: %s %s -> %d" % (self.rule["at"], self.command, self.path, resp.status))
            hostile = False
        if hostile and rng.random() < st.probs["error"]:
            self.send_error_answer(rng, "after the write" if self.command != "GET" else "instead of the answer")
            return
        kinds = ["wrongtype", "items", "badutf8", "duplicate", "huge", "truncate", "reset", "stall"]
        kind = roll(st.probs, rng, kinds) if hostile else None
        what = None
        if kind in ("wrongtype", "items", "badutf8", "duplicate", "huge"):
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
            if isinstance(doc, (dict, list)):
                body = Body(doc)
                interesting = LIST_INTERESTING if isinstance(doc, dict) and "items" in doc else INTERESTING
                what = mutate_doc(body, kind, rng, interesting, self.extra)
                if what:
                    raw = body.encode()
                    self.note(kind)
                    log("%s: %s %s -> %d" % (what, self.command, self.path, resp.status))
        if kind == "stall":
            self.stall(rng, "before the answer")
        self.send_response(resp.status)
        if kind == "truncate" and len(raw) > 1:
            cut = rng.randrange(1, len(raw))
            self.note("truncate")
            log("truncated at %d of %d: %s %s" % (cut, len(raw), self.command, self.path))
            self.pass_headers(resp, cut)
            self.wfile.write(raw[:cut])
            return
        self.pass_headers(resp, len(raw))
        if kind == "reset" and len(raw) > 1:
            cut = rng.randrange(0, len(raw))
            self.note("reset")
            log("reset at %d of %d: %s %s" % (cut, len(raw), self.command, self.path))
            self.wfile.write(raw[:cut])
            self.reset()
            return
        self.wfile.write(raw)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
        self.wfile.flush()

    def stream(self, up, resp, rng, hostile):
        """A watch: event by event, as kube-lite sends them."""
        st = self.st
        sock = up.sock
        with st.lock:
            st.streams.add(sock)
        try:
            self.send_response(resp.status)
            self.pass_headers(resp, chunked=True)
            pending = b""
            while True:
                try:
                    data = resp.read1(65536)
                except (OSError, http.client.HTTPException):
                    data = b""
                if not data:
                    break
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if not self.event(line + b"\n", rng, hostile and not st.passthrough.is_set()):
                        return
            if pending:
                self.chunk(pending)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
        finally:
            with st.lock:
                st.streams.discard(sock)

    def event(self, line, rng, hostile):
        """Sends one event (maybe corrupted); False once the stream is over."""
        st = self.st
        probs = st.probs
        rule = st.scripted("WATCH", urllib.parse.urlsplit(self.path).path, line.decode("utf-8", "replace"))
        if rule:
            self.note("scripted")
            log("scripted event with a wrong type at %s: %s" % (rule["at"], self.path))
            self.chunk(wrong_type_at(line, rule["at"]) + b"\n")
            return True
        if not hostile:
            self.chunk(line)
            return True
        kind = roll(probs, rng, ["badevent", "wrongtype", "badutf8", "duplicate", "huge", "truncate", "reset", "stall", "split"])
        if kind == "badevent":
            self.note(kind)
            bad = bad_event(rng)
            log("bad event %s on %s" % (bad[:80].decode("utf-8", "replace"), self.path))
            self.chunk(bad + b"\n")
            # The real event follows: a client that skips the bad one still sees it.
            self.chunk(line)
            return True
        if kind in ("wrongtype", "badutf8", "duplicate", "huge"):
            try:
                doc = json.loads(line)
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                body = Body(doc)
                what = mutate_doc(body, kind, rng, EVENT_INTERESTING, self.extra)
                if what:
                    self.note(kind)
                    log("event %s: %s" % (what, self.path))
                    self.chunk(body.encode() + b"\n")
                    return True
        if kind == "stall":
            self.stall(rng, "watch")
        if kind == "split" and len(line) > 2:
            self.note(kind)
            cut = rng.randrange(1, len(line) - 1)
            self.chunk(line[:cut])
            self.chunk(line[cut:])
            return True
        if kind == "truncate" and len(line) > 2:
            self.note(kind)
            cut = rng.randrange(1, len(line) - 1)
            log("watch ends mid-event at %d of %d: %s" % (cut, len(line), self.path))
            self.chunk(line[:cut])
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return False
        if kind == "reset":
            self.note(kind)
            cut = rng.randrange(0, len(line))
            log("watch reset at %d of %d: %s" % (cut, len(line), self.path))
            if cut:
                self.chunk(line[:cut])
            self.reset()
            return False
        self.chunk(line)
        return True


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A client that went away mid-answer is normal here; anything else is
        # a bug of the proxy worth one line, never a crash.
        e = sys.exc_info()[1]
        if not isinstance(e, (ConnectionError, BrokenPipeError, socket.timeout)):
            log("handler error: %r" % (e,))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0", help="host:port to serve on (port 0: any free port)")
    ap.add_argument("--upstream", required=True, help="the API server behind, http://host:port")
    ap.add_argument("--seed", type=int, default=None, help="seed of every decision (default: random, printed)")
    ap.add_argument("--probs", default="", help="JSON object overriding probabilities of " + ",".join(DEFAULTS))
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every probability")
    ap.add_argument("--spare", default="", help="regex of paths passed through untouched (to narrow a replay down)")
    ap.add_argument("--script", default="", help="JSON list of scripted lies (see the module's help)")
    a = ap.parse_args()

    up = urllib.parse.urlsplit(a.upstream)
    if up.scheme != "http" or not up.hostname:
        ap.error("--upstream must be http://host:port")
    probs = dict(DEFAULTS)
    if a.probs:
        extra = json.loads(a.probs)
        unknown = set(extra) - set(DEFAULTS)
        if unknown:
            ap.error("--probs: unknown %s" % ",".join(sorted(unknown)))
        probs.update(extra)
    probs = {k: v * a.scale for k, v in probs.items()}
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    script = json.loads(a.script) if a.script else []
    for r in script:
        if r.get("do") not in ("refuse", "fail-after", "wrongtype") or "method" not in r or "path" not in r or (r["do"] == "wrongtype" and "at" not in r):
            ap.error("--script: a rule needs method, path and do (refuse, fail-after, or wrongtype with at): %r" % (r,))
    st = State((up.hostname, up.port or 80), seed, probs, re.compile(a.spare) if a.spare else None, script)
    Handler.st = st

    host, _, port = a.listen.rpartition(":")
    srv = Server((host, int(port)), Handler)
    log("seed %d (replay with HOSTILE_SEED=%d)" % (seed, seed))
    log("probabilities " + json.dumps(probs, sort_keys=True))
    log("serving on http://%s:%d" % srv.server_address[:2])

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=st.go_passthrough, daemon=True).start())
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    while not stop.wait(0.5):
        pass
    st.report()
    srv.shutdown()
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
