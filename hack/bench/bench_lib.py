"""What the Python clients of the benchmarks under hack/bench share: a
keep-alive HTTP client per thread, parallel requests, the request counters of
kube-lite's and a binary's /metrics, and a process's CPU, memory and threads
from /proc (sampled for the peak).
"""
import http.client
import json
import os
import re
import threading
import time
import urllib.parse


class Client:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.local = threading.local()

    def conn(self):
        c = getattr(self.local, "c", None)
        if c is None:
            c = http.client.HTTPConnection(self.host, self.port, timeout=30)
            self.local.c = c
        return c

    def req(self, method, path, body=None, ctype="application/json"):
        for attempt in range(5):
            c = self.conn()
            try:
                data = json.dumps(body).encode() if body is not None else None
                hdrs = {"Content-Type": ctype} if data else {}
                c.request(method, path, body=data, headers=hdrs)
                r = c.getresponse()
                text = r.read()
                return r.status, text
            except (OSError, http.client.HTTPException):
                c.close()
                self.local.c = None
                time.sleep(0.1 * (attempt + 1))
        raise RuntimeError("%s %s: no answer" % (method, path))


def parallel(fn, items, threads=8):
    errs = []

    def work(chunk):
        for it in chunk:
            try:
                fn(it)
            except Exception as e:  # reported below
                errs.append(str(e))

    ts = [threading.Thread(target=work, args=(items[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise RuntimeError(errs[0])


def proc_cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def proc_mem(pid):
    rss = threads = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    dirty = 0
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Private_Dirty:"):
                dirty = int(line.split()[1])
    return rss, dirty, threads


def writes_of(port):
    """The binary's own successful write requests (all kinds, Events included)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    n = 0
    for m in re.finditer(r'^rest_client_requests_total\{([^}]*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("method") in ("POST", "PUT", "PATCH", "DELETE") and labels.get("code", "").startswith("2"):
            n += float(m.group(2))
    return n


def api_requests(cl):
    """kube-lite's answered requests: {(verb, resource, code): count}, every
    caller together (a status subresource counts as its resource)."""
    _, text = cl.req("GET", "/metrics")
    out = {}
    for m in re.finditer(r'^apiserver_request_total\{([^}]*)\} (\S+)$', text.decode(), re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("code", ""))
        out[key] = out.get(key, 0) + float(m.group(2))
    return out


def api_count(counts, verbs, resource, ok_only=True):
    """The requests of api_requests() with one of verbs on resource."""
    return sum(n for (v, r, c), n in counts.items()
               if v in verbs and r == resource and (not ok_only or c.startswith("2")))


def events_written(cl):
    return api_count(api_requests(cl), ("create", "patch", "update"), "events", ok_only=False)


class Sampler(threading.Thread):
    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids = pids
        self.peak = {k: (0, 0, 0) for k in pids}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for k, pid in self.pids.items():
                try:
                    r, d, t = proc_mem(pid)
                except OSError:
                    continue
                p = self.peak[k]
                self.peak[k] = (max(p[0], r), max(p[1], d), max(p[2], t))
            time.sleep(0.2)


def listed(cl, path):
    st, text = cl.req("GET", path)
    if st != 200:
        raise RuntimeError("GET %s: %d" % (path, st))
    return json.loads(text).get("items", [])


def wait(cl, what, done, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if done():
            return True
        time.sleep(0.2)
    print("  FAIL: %s not done within %ds" % (what, timeout))
    return False
