#!/usr/bin/env python3
"""The differential test's driver and judge (tests/kube-lite/test_differential.sh).

  difftool.py run --server URL --ca CA --kubeconfig KC --token USER=TOKEN... \
                  --compact etcd:URL|kube-lite --out FILE
      sends every step of scenario.py to one API server (curl for HTTP, kubectl
      for the kubectl steps) and records the answers in FILE (JSON).
  difftool.py compare REAL.json LITE.json --exceptions FILE
      normalises both records, compares them step by step and prints one
      "ok NAME" or "FAIL NAME" (with the difference) per checked step.

The same steps go to both servers; the only per-server text is what a step
saved from that server's own earlier answers (${name} in a path or body: a
resourceVersion, a uid), as a client reads them back.
"""
import argparse
import copy
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenario  # noqa: E402  (the steps, beside this file)

# ---- run ----------------------------------------------------------------------------------


def dig(obj, path):
    """The value at a dotted path ("items.0.metadata.uid"), or None."""
    for part in path.split("."):
        if isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return None
    return obj


def fill(text, saved):
    return re.sub(r"\$\{(\w+)\}", lambda m: str(saved.get(m.group(1), "<unset:%s>" % m.group(1))), text)


def curl(args, step, saved):
    method = step.get("method", "GET")
    url = args.server + fill(step["path"], saved)
    cmd = ["curl", "-sS", "--max-time", "20", "--cacert", args.ca, "-X", method,
           "-H", "Authorization: Bearer " + args.tokens[step.get("user", "admin")],
           "-H", "Accept: " + step.get("accept", "application/json"),
           "-o", "-", "-w", "\n%{http_code}"]
    body = step.get("body")
    if body is not None:
        text = body if isinstance(body, str) else json.dumps(body)
        cmd += ["-H", "Content-Type: " + step.get("ctype", "application/json"),
                "--data-binary", fill(text, saved)]
    out = subprocess.run(cmd + [url], capture_output=True, text=True).stdout
    text, _, code = out.rpartition("\n")
    rec = {"code": int(code) if code.isdigit() else 0}
    if step.get("kind") == "watch" and rec["code"] == 200:
        events = []
        for line in text.splitlines():
            if line.strip():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    events.append({"unparsed": line})
        # A watch refused before it starts answers one Status, not events.
        if len(events) == 1 and events[0].get("kind") == "Status":
            rec["body"] = events[0]
        else:
            rec["events"] = events
    else:
        try:
            rec["body"] = json.loads(text)
        except ValueError:
            rec["body"] = text
    return rec


def kubectl(args, step, cache):
    cmd = ["kubectl", "--kubeconfig", args.kubeconfig, "--cache-dir", cache,
           "--request-timeout=20s"] + [fill(a, {}) for a in step["kubectl"]]
    p = subprocess.run(cmd, capture_output=True, text=True)
    # kubectl 1.32 warns about a 1.20 server (version skew); not part of the answer.
    err = "\n".join(l for l in p.stderr.splitlines() if "version skew" not in l.lower()
                    and not l.startswith("WARNING: version difference"))
    return {"code": p.returncode, "body": p.stdout, "stderr": err}


def compact(args):
    """Drops the history older than now, each server its own way: etcd's
    compaction API (the real server keeps its history in etcd) or kube-lite's
    admin endpoint. Old resourceVersions then answer 410 on both."""
    if args.compact.startswith("etcd:"):
        etcd = args.compact[5:]
        rev = json.loads(subprocess.run(
            ["curl", "-sS", "-X", "POST", etcd + "/v3/kv/range", "-d", '{"key":"AA=="}'],
            capture_output=True, text=True).stdout)["header"]["revision"]
        subprocess.run(["curl", "-sS", "-X", "POST", etcd + "/v3/kv/compaction",
                        "-d", json.dumps({"revision": rev, "physical": True})],
                       capture_output=True, text=True, check=True)
    else:
        subprocess.run(["curl", "-sS", "--cacert", args.ca, "-X", "POST",
                        "-H", "Authorization: Bearer " + args.tokens["admin"],
                        args.server + "/kube-lite/compact"], capture_output=True, check=True)
    return {"code": 0, "body": None}


def run(args):
    saved = {}
    records = []
    cache = tempfile.mkdtemp(prefix="difftool-kubectl-")
    for step in scenario.STEPS:
        kind = step.get("kind", "request")
        if kind == "kubectl":
            rec = kubectl(args, step, cache)
        elif kind == "compact":
            rec = compact(args)
        else:
            rec = curl(args, step, saved)
        for var, path in step.get("save", {}).items():
            v = dig(rec.get("body"), path)
            if v is not None:
                saved[var] = v
        rec["name"] = step["name"]
        records.append(rec)
    with open(args.out, "w") as f:
        json.dump(records, f, indent=1)


# ---- normalisation ------------------------------------------------------------------------

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
AGE_COLUMNS = ("Age", "Last Seen", "First Seen")


def norm_message(s):
    # resourceVersions are each server's own counter (kube-apiserver's is etcd's
    # revision, which its own bookkeeping also advances): numbers in messages go.
    s = re.sub(r"too old resource version: \d+ \(\d+\)", "too old resource version: <rv> (<rv>)", s)
    s = re.sub(r"Too large resource version: \d+, current: \d+",
               "Too large resource version: <rv>, current: <rv>", s)
    s = re.sub(r"ResourceVersion in record \(\d+\)", "ResourceVersion in record (<rv>)", s)
    # Go prints pointers in %#v values of field errors (PersistentVolumeName:(*string)(0xc00d5b15c0)).
    s = re.sub(r"\(0x[0-9a-f]+\)", "(0xPTR)", s)
    return UUID.sub("<uid>", s)


def norm(o, key=None):
    if isinstance(o, dict):
        out = {}
        for k, v in o.items():
            # selfLink: kube-apiserver 1.20 no longer sets it (RemoveSelfLink), kube-lite never did.
            if k == "selfLink":
                continue
            # The server's clock: creation and deletion times, managedFields times.
            if k in ("creationTimestamp", "deletionTimestamp") and isinstance(v, str):
                out[k] = "<time>"
            # Each server's own resourceVersion counter (metadata and list metadata).
            elif k == "resourceVersion" and key in ("metadata", None) and isinstance(v, str):
                out[k] = "<rv>"
            # Continue tokens are opaque, each server encodes its own.
            elif k == "continue" and key == "metadata" and isinstance(v, str):
                out[k] = "<continue>"
            elif k == "message" and isinstance(v, str):
                out[k] = norm_message(v)
            else:
                out[k] = norm(v, k)
        if out.get("kind") == "CustomResourceDefinition" and isinstance(out.get("status"), dict):
            # The apiextensions controllers stamp their conditions with the server's
            # clock, and race each other to write them (the order varies).
            conds = out["status"].get("conditions")
            if isinstance(conds, list):
                for c in conds:
                    if isinstance(c, dict) and "lastTransitionTime" in c:
                        c["lastTransitionTime"] = "<time>"
                out["status"]["conditions"] = sorted(conds, key=lambda c: str(c.get("type")))
        if out.get("kind") == "APIResourceList" and isinstance(out.get("resources"), list):
            # kube-apiserver lists a CRD group's resources in its informer cache's
            # (Go map) order.
            out["resources"] = sorted(out["resources"], key=lambda r: str(r.get("name")))
        if out.get("kind") == "Table" and isinstance(out.get("rows"), list):
            # Ages count from each server's creation time and the moment asked.
            cols = [c.get("name") for c in out.get("columnDefinitions") or []]
            for row in out["rows"]:
                for i, c in enumerate(cols):
                    if c in AGE_COLUMNS and i < len(row.get("cells", [])):
                        row["cells"][i] = "<age>"
        return out
    if isinstance(o, list):
        return [norm(x, key) for x in o]
    if isinstance(o, str):
        # uids are random per server (also where they are copied: claimRef, involvedObject, details).
        return UUID.sub("<uid>", o)
    return o


def norm_text(s):
    # kubectl's tables: ages (5s, 2m3s, 2y30d) and the column padding around them.
    s = re.sub(r"(?<![\w.-])\d+[smhdy](\d+[smhd])?(?![\w.-])", "<age>", s)
    s = re.sub(r"[ \t]+", " ", s)
    # -o yaml: uid, times and resourceVersions.
    s = re.sub(r'(creationTimestamp|deletionTimestamp|resourceVersion): "?[^"\n]*"?', r"\1: <x>", s)
    return UUID.sub("<uid>", s)


# ---- exceptions: kube-lite differs on purpose (the list is in test_differential.sh) ----------

def walk_objects(rec, fn):
    """Calls fn on every API object of a record: the body, list items, watch
    event objects, Table row objects."""
    def visit(o):
        if isinstance(o, dict):
            if isinstance(o.get("metadata"), dict):
                fn(o)
            for k in ("items", "rows"):
                for x in o.get(k) or []:
                    visit(x)
            if isinstance(o.get("object"), dict):
                visit(o["object"])
    visit(rec.get("body"))
    for e in rec.get("events") or []:
        visit(e)


def drop_finalizers(names):
    def fn(o):
        m = o["metadata"]
        if isinstance(m.get("finalizers"), list):
            m["finalizers"] = [f for f in m["finalizers"] if f not in names]
            if not m["finalizers"]:
                del m["finalizers"]
    return fn


def x_managed_fields(real, lite, step):
    for rec in (real, lite):
        walk_objects(rec, lambda o: o["metadata"].pop("managedFields", None))


def x_protection_finalizers(real, lite, step):
    walk_objects(real, drop_finalizers(("kubernetes.io/pv-protection", "kubernetes.io/pvc-protection")))
    # The write that only dropped that finalizer is a MODIFIED event on
    # kube-apiserver and no change at all on kube-lite.
    if real.get("events"):
        last = {}
        keep = []
        for e in real["events"]:
            o = e.get("object") if isinstance(e, dict) else None
            if not isinstance(o, dict) or not isinstance(o.get("metadata"), dict):
                keep.append(e)
                continue
            name = o["metadata"].get("name")
            same = copy.deepcopy(o)
            for m in (same["metadata"],):
                m.pop("resourceVersion", None)
                m.pop("managedFields", None)
            if e.get("type") == "MODIFIED" and last.get(name) == same:
                continue
            last[name] = same
            keep.append(e)
        real["events"] = keep


def x_not_ready_taint(real, lite, step):
    def fn(o):
        spec = o.get("spec")
        if o.get("kind", "Node") == "Node" and isinstance(spec, dict) and isinstance(spec.get("taints"), list):
            spec["taints"] = [t for t in spec["taints"] if t.get("key") != "node.kubernetes.io/not-ready"]
            if not spec["taints"]:
                del spec["taints"]
    walk_objects(real, fn)


def tables(rec):
    out = []
    if isinstance(rec.get("body"), dict) and rec["body"].get("kind") == "Table":
        out.append(rec["body"])
    for e in rec.get("events") or []:
        o = e.get("object") if isinstance(e, dict) else None
        if isinstance(o, dict) and o.get("kind") == "Table":
            out.append(o)
    return out


def x_column_descriptions(real, lite, step):
    for rec in (real, lite):
        for t in tables(rec):
            for c in t.get("columnDefinitions") or []:
                c.pop("description", None)


def x_vac_column(real, lite, step):
    for t in tables(lite):
        cols = t.get("columnDefinitions") or []
        idx = [i for i, c in enumerate(cols) if c.get("name") == "VolumeAttributesClass"]
        for i in reversed(idx):
            del cols[i]
            for row in t.get("rows") or []:
                if i < len(row.get("cells", [])):
                    del row["cells"][i]
    if step.get("kind") == "kubectl" and isinstance(lite.get("body"), str):
        lite["body"] = drop_text_column(lite["body"], "VOLUMEATTRIBUTESCLASS")


def drop_text_column(text, title):
    """Removes a column of kubectl's table text (by the title's position)."""
    out = []
    start = None
    end = None
    for line in text.splitlines():
        if title in line.split():
            start = line.index(title)
            rest = line[start + len(title):]
            end = start + len(title) + (len(rest) - len(rest.lstrip(" ")))
        elif not line.strip() or line.startswith("NAME"):
            start = None
        out.append(line[:start] + line[end:] if start is not None else line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def messages(rec, fn):
    """Applies fn to every Status message (and cause message) of a record."""
    b = rec.get("body")
    objs = [b] + [e.get("object") for e in rec.get("events") or [] if isinstance(e, dict)]
    for o in objs:
        if isinstance(o, dict) and o.get("kind") == "Status":
            if isinstance(o.get("message"), str):
                o["message"] = fn(o["message"])
            for c in (o.get("details") or {}).get("causes") or []:
                if isinstance(c.get("message"), str):
                    c["message"] = fn(c["message"])


def x_immutable_diff(real, lite, step):
    cut = lambda m: re.sub(r"(immutable after creation[^\n]*)\n[\s\S]*", r"\1", m)
    messages(real, cut)
    messages(lite, cut)


def x_newer_wording(real, lite, step):
    def fn(m):
        m = re.sub(r"Too long: may not be more than (\d+) bytes", r"Too long: must have at most \1 bytes", m)
        m = m.replace(', "ReadWriteOncePod"', "")
        m = m.replace("field can not be less than status.capacity", "field can not be less than previous value")
        return m.replace(" and volumeAttributesClassName for bound claims", " for bound claims")
    messages(lite, fn)


def x_json_syntax(real, lite, step):
    b = real.get("body")
    if isinstance(b, dict) and b.get("code") == 400 and re.search(
            r"invalid character|unexpected end of JSON|couldn't get version/kind|error found in #", b.get("message", "")):
        for rec in (real, lite):
            if isinstance(rec.get("body"), dict) and rec["body"].get("code") == 400:
                rec["body"]["message"] = "<a decoding error, in the words of the server's JSON library>"


def x_newer_item_paths(real, lite, step):
    """Schema errors of array items: kube-lite names the item (spec.protocols[1]), as
    kube-openapi does since 1.2x; 1.20's go-openapi names the array."""
    b = lite.get("body")
    if not isinstance(b, dict) or b.get("kind") != "Status":
        return
    for c in (b.get("details") or {}).get("causes") or []:
        field, msg = c.get("field"), c.get("message")
        if isinstance(field, str) and isinstance(msg, str) and " in body " in msg and "[" in field:
            plain = re.sub(r"\[\d+\]", "", field)
            c["field"] = plain
            c["message"] = msg.replace(field, plain)
            if isinstance(b.get("message"), str):
                b["message"] = b["message"].replace(field, plain)


def x_crd_discovery(real, lite, step):
    b = real.get("body")
    if isinstance(b, dict) and b.get("kind") == "APIResourceList" and any(
            "storageVersionHash" in r for r in b.get("resources") or []):
        for rec in (real, lite):
            for r in rec["body"].get("resources") or []:
                r.pop("storageVersionHash", None)
                if isinstance(r.get("verbs"), list):
                    r["verbs"] = sorted(r["verbs"])


def x_crd_list_continue(real, lite, step):
    a, b = real.get("body"), lite.get("body")
    if (isinstance(a, dict) and isinstance(b, dict) and str(a.get("kind", "")).endswith("List")
            and (a.get("metadata") or {}).get("continue") == "" and "continue" not in (b.get("metadata") or {})):
        del a["metadata"]["continue"]


def x_events_storage(real, lite, step):
    if "/apis/events.k8s.io/" in step.get("path", "") and lite.get("code") == 404:
        for rec in (real, lite):
            rec["code"] = "<events.k8s.io view>"
            rec["body"] = None


def x_microtime(real, lite, step):
    b = real.get("body")
    if isinstance(b, dict) and "as \"2006-01-02T15:04:05.000000Z07:00\"" in b.get("message", ""):
        for rec in (real, lite):
            rec["code"] = "<MicroTime format>"
            rec["body"] = None


def x_repeated_causes(real, lite, step):
    for rec in (real, lite):
        b = rec.get("body")
        causes = (b.get("details") or {}).get("causes") if isinstance(b, dict) else None
        if causes:
            seen = []
            for c in causes:
                if c not in seen:
                    seen.append(c)
            b["details"]["causes"] = seen


EXCEPTIONS = {
    "managed-fields": x_managed_fields,
    "protection-finalizers": x_protection_finalizers,
    "node-not-ready-taint": x_not_ready_taint,
    "column-descriptions": x_column_descriptions,
    "volumeattributesclass-column": x_vac_column,
    "immutable-diff": x_immutable_diff,
    "newer-api-wording": x_newer_wording,
    "json-syntax-errors": x_json_syntax,
    "events-shared-storage": x_events_storage,
    "microtime-format": x_microtime,
    "repeated-causes": x_repeated_causes,
    "schema-item-paths": x_newer_item_paths,
    "crd-discovery": x_crd_discovery,
    "crd-list-continue": x_crd_list_continue,
}


# ---- compare ------------------------------------------------------------------------------

def show(rec):
    d = {"code": rec.get("code")}
    for k in ("body", "events", "stderr"):
        if k in rec and (k != "stderr" or rec[k]):
            d[k] = rec[k]
    if isinstance(d.get("body"), str):
        return ["code %s" % d["code"]] + d["body"].splitlines() + (d.get("stderr") or "").splitlines()
    return json.dumps(d, indent=1, sort_keys=True).splitlines()


def compare(args):
    real = json.load(open(args.real))
    lite = json.load(open(args.lite))
    active = []
    for line in open(args.exceptions):
        xid = line.split(":", 1)[0].strip()
        if xid:
            if xid not in EXCEPTIONS:
                print("FAIL exception %s is listed but unknown to difftool.py" % xid)
                continue
            active.append(xid)
    used = set()
    steps = {s["name"]: s for s in scenario.STEPS}
    for a, b in zip(real, lite):
        step = steps[a["name"]]
        if not step.get("check", True):
            continue
        a = copy.deepcopy(a)
        b = copy.deepcopy(b)
        for xid in active:
            before = (json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True))
            EXCEPTIONS[xid](a, b, step)
            if (json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True)) != before:
                used.add(xid)
        for rec in (a, b):
            if isinstance(rec.get("body"), str):
                rec["body"] = norm_text(rec["body"])
                rec["stderr"] = norm_text(rec.get("stderr", ""))
            else:
                rec["body"] = norm(rec.get("body"))
            if "events" in rec:
                rec["events"] = [norm(e) for e in rec["events"]]
        sa, sb = show(a), show(b)
        if sa == sb:
            print("ok   %s" % step["name"])
        else:
            print("FAIL %s" % step["name"])
            diff = list(difflib.unified_diff(sa, sb, "kube-apiserver", "kube-lite", lineterm="", n=1))
            for l in diff[:40]:
                print("     " + l)
            if len(diff) > 40:
                print("     ... (%d more lines)" % (len(diff) - 40))
    for xid in active:
        if xid not in used:
            print("note exception %s was not needed by any step" % xid)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--server", required=True)
    r.add_argument("--ca", required=True)
    r.add_argument("--kubeconfig", required=True)
    r.add_argument("--token", action="append", default=[])
    r.add_argument("--compact", required=True)
    r.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("real")
    c.add_argument("lite")
    c.add_argument("--exceptions", required=True)
    args = p.parse_args()
    if args.cmd == "run":
        args.tokens = dict(t.split("=", 1) for t in args.token)
        run(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
