#!/usr/bin/env python3
"""Writes hack/kube-lite/proto_tables.c: the protobuf field tables of every
built-in type kube-lite serves, read from Kubernetes' own sources.

Usage:
    hack/kube-lite/gen-proto-tables.py [-o hack/kube-lite/proto_tables.c] [LABEL=]SRC ...

as proto_tables.c was made:
    K=${K8S_CACHE:-~/.cache/csi-sidecars/kubernetes}/1.20.5+really1.20.2-1.1+deb12u1
    hack/kube-lite/gen-proto-tables.py \
      "Kubernetes 1.20.2 (Debian kubernetes 1.20.5+really1.20.2-1.1+deb12u1, staging/src/k8s.io)=$K/gopath/src/k8s.io/kubernetes/staging/src/k8s.io" \
      "k8s.io/api and k8s.io/apimachinery v0.36.3 (Kubernetes 1.36.3)=NEW"

Each SRC is a `k8s.io` directory holding `api/` and `apimachinery/` as
k8s.io/api and k8s.io/apimachinery lay them out:
  - Kubernetes 1.20.2's staging tree, which hack/kubernetes/build.sh unpacks:
    ${K8S_CACHE:-~/.cache/csi-sidecars/kubernetes}/1.20.5+really1.20.2-1.1+deb12u1/
    gopath/src/k8s.io/kubernetes/staging/src/k8s.io
  - a newer release for the types and fields added since (CSIStorageCapacity
    v1, VolumeAttributesClass v1, PodSpec.resources, ...):
      mkdir -p NEW && cd NEW
      git clone -q --depth 1 -b v0.36.3 https://github.com/kubernetes/api
      git clone -q --depth 1 -b v0.36.3 https://github.com/kubernetes/apimachinery

Sources are read in the order given. A later one may add messages and fields;
a field number it shares with an earlier one must have the same label and
scalar type (a message type may only change to one of WIRE_RENAMES; a proto
name may change, as aPIVersion became apiVersion: the wire does not carry
it), so the tables hold exactly what both releases put on the wire. A field
only older sources have (ObjectMeta.clusterName) is kept, flagged
KL_PBF_GONE: read, and written only when an object has it, since the newest
server never writes it.

From generated.proto come field numbers, labels and types. From the Go
structs next to it (types.go and friends) come what the JSON side needs:
the JSON name, omitempty and omitzero, whether the Go field is a pointer (the generated
marshallers write every non-pointer field, zero or not, and pointers only
when set) and inlined structs (`json:",inline"`), in declaration order (the
order encoding/json writes). The struct tags' protobuf numbers are checked
against the .proto.

The output is run through clang-format with the repository's style.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

# The top-level kinds: (proto package, message, apiVersion, kind). Every
# non-custom kl_type in types.c needs its kind and list kind here
# (test_kl_proto checks). apiVersion None: the meta.k8s.io kinds client-go
# sends with the endpoint's group version (DeleteOptions) or that any group
# answers (Status, WatchEvent).
CORE = "k8s.io.api.core.v1"
STORAGE = "k8s.io.api.storage.v1"
META = "k8s.io.apimachinery.pkg.apis.meta.v1"
WITH_LISTS = [
    (CORE, "v1", ["Namespace", "Node", "PersistentVolume", "PersistentVolumeClaim", "Pod",
                  "Secret", "ConfigMap", "Event", "ServiceAccount"]),
    (STORAGE, "storage.k8s.io/v1", ["StorageClass", "VolumeAttachment", "CSINode", "CSIDriver",
                                    "CSIStorageCapacity", "VolumeAttributesClass"]),
    ("k8s.io.api.coordination.v1", "coordination.k8s.io/v1", ["Lease"]),
    ("k8s.io.api.events.v1", "events.k8s.io/v1", ["Event"]),
    ("k8s.io.api.apps.v1", "apps/v1", ["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet"]),
    ("k8s.io.api.rbac.v1", "rbac.authorization.k8s.io/v1",
     ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]),
]
EXTRA_ROOTS = [
    ("k8s.io.api.authentication.v1", "TokenRequest", "authentication.k8s.io/v1", "TokenRequest"),
    (META, "Status", "v1", "Status"),
    (META, "DeleteOptions", None, "DeleteOptions"),
    (META, "WatchEvent", None, "WatchEvent"),
]

# Messages whose Go types marshal to JSON by hand: C kind and the fields the
# C code relies on (number: (name, type)).
SPECIAL = {
    META + ".Time": ("KL_PB_TIME", {1: ("seconds", "int64"), 2: ("nanos", "int32")}),
    META + ".MicroTime": ("KL_PB_MICROTIME", {1: ("seconds", "int64"), 2: ("nanos", "int32")}),
    # No served type holds a Duration: proto.c has no kind for it, and the
    # generator stops if one ever becomes reachable.
    META + ".Duration": (None, {1: ("duration", "int64")}),
    META + ".FieldsV1": ("KL_PB_FIELDSV1", {1: ("Raw", "bytes")}),
    "k8s.io.apimachinery.pkg.api.resource.Quantity": ("KL_PB_QUANTITY", {1: ("string", "string")}),
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": (
        "KL_PB_INTORSTR", {1: ("type", "int64"), 2: ("intVal", "int32"), 3: ("strVal", "string")}),
    "k8s.io.apimachinery.pkg.runtime.RawExtension": ("KL_PB_RAWEXT", {1: ("raw", "bytes")}),
}

SCALARS = {"string": "KL_PB_STRING", "bytes": "KL_PB_BYTES", "bool": "KL_PB_BOOL",
           "int32": "KL_PB_INT32", "int64": "KL_PB_INT64"}

# Field type changes between releases that keep the wire format (the newer
# message reads every field the older one wrote): (message, number, old, new).
WIRE_RENAMES = {
    (CORE + ".PersistentVolumeClaimSpec", 2, CORE + ".ResourceRequirements",
     CORE + ".VolumeResourceRequirements"),
    (CORE + ".Probe", 1, CORE + ".Handler", CORE + ".ProbeHandler"),
    (CORE + ".Lifecycle", 1, CORE + ".Handler", CORE + ".LifecycleHandler"),
    (CORE + ".Lifecycle", 2, CORE + ".Handler", CORE + ".LifecycleHandler"),
}


def die(msg):
    sys.exit("gen-proto-tables: " + msg)


# ---- generated.proto ---------------------------------------------------------

FIELD_RE = re.compile(r"^(optional|repeated|required)\s+([\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;$")
MAP_RE = re.compile(r"^map<\s*(\w+)\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+)\s*;$")


def strip_comments(text):
    # Line comments first: their text may hold "/*" (paths such as apis/*).
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def parse_proto(path):
    """{message: {num: (label, type, name, map_key)}} and the package."""
    text = strip_comments(open(path, encoding="utf-8").read())
    pkg = None
    msgs = {}
    cur = None
    for line in (l.strip() for l in text.split("\n")):
        if not line:
            continue
        if re.match(r"^(syntax|import|option)\b", line):
            continue
        m = re.match(r"^package\s+([\w.]+)\s*;$", line)
        if m:
            pkg = m.group(1)
            continue
        m = re.match(r"^message\s+(\w+)\s*\{$", line)
        if m and cur is None:
            cur = m.group(1)
            msgs[cur] = {}
            continue
        if line == "}" and cur is not None:
            cur = None
            continue
        if cur is None:
            die("%s: unexpected line outside a message: %s" % (path, line))
        m = FIELD_RE.match(line)
        if m:
            label, typ, name, num = m.groups()
            msgs[cur][int(num)] = (label, typ, name, None)
            continue
        m = MAP_RE.match(line)
        if m:
            key, typ, name, num = m.groups()
            msgs[cur][int(num)] = ("map", typ, name, key)
            continue
        die("%s: message %s: unexpected line: %s" % (path, cur, line))
    if not pkg:
        die("%s: no package" % path)
    return pkg, msgs


# ---- Go structs ----------------------------------------------------------------

TAG_RE = re.compile(r'(\w+):"([^"]*)"')


def parse_go_structs(pkgdir):
    """{struct: [field dict in declaration order]} for the package's .go files."""
    structs = {}
    skip = ("_test.go", "generated.pb.go", "_swagger_doc_generated.go")
    for fn in sorted(os.listdir(pkgdir)):
        if not fn.endswith(".go") or fn.endswith(skip) or fn.startswith("zz_generated"):
            continue
        cur = None
        for raw in open(os.path.join(pkgdir, fn), encoding="utf-8"):
            line = raw.rstrip("\n")
            m = re.match(r"^type\s+(\w+)\s+struct\s*\{\s*$", line)
            if m:
                cur = m.group(1)
                structs[cur] = []
                continue
            if cur is None:
                continue
            if line.startswith("}"):
                cur = None
                continue
            s = line.strip()
            if not s or s.startswith("//") or "`" not in s:
                continue
            head, tag = s.split("`", 2)[:2]
            toks = head.split()
            if len(toks) == 1:
                name, gotype = toks[0].lstrip("*").split(".")[-1], toks[0]
            elif len(toks) == 2:
                name, gotype = toks
            else:
                die("%s: struct %s: cannot read field: %s" % (fn, cur, s))
            tags = dict(TAG_RE.findall(tag))
            if "protobuf" not in tags or tags["protobuf"] == "-":
                continue
            pb = tags["protobuf"].split(",")
            js = tags.get("json", "").split(",")
            structs[cur].append({
                "go": name,
                "ptr": gotype.startswith("*"),
                "gotype": gotype,
                "num": int(pb[1]),
                "pbname": next((p[5:] for p in pb if p.startswith("name=")), None),
                "json": js[0],
                "omitempty": "omitempty" in js[1:],
                "omitzero": "omitzero" in js[1:],
                "inline": "inline" in js[1:] and js[0] == "",
            })
    return structs


def merge_go(old, new):
    """The newer struct's fields in its order, with fields only the older one
    has (removed since, like ObjectMeta.clusterName) after the field that
    preceded them there: an older client may still send them."""
    out = list(new)
    have = {g["num"] for g in new}
    prev = None
    for g in old:
        if g["num"] not in have:
            at = next((i + 1 for i, h in enumerate(out) if h["num"] == prev), 0)
            out.insert(at, g)
            have.add(g["num"])
        prev = g["num"]
    return out


# ---- the merged model ------------------------------------------------------------

class Model:
    def __init__(self):
        self.msgs = {}  # fq name -> {num: (label, type fq or scalar, name, map key)}
        self.latest = {}  # fq name -> field numbers of the last source that has the message
        self.go = {}  # fq name -> [go fields]
        self.notes = []

    def pkg_dir(self, src, pkg):
        parts = pkg.split(".")
        if parts[:2] != ["k8s", "io"]:
            die("unexpected package " + pkg)
        return os.path.join(src, *parts[2:])

    def load(self, src):
        done = set()
        todo = [p for p, _, _ in WITH_LISTS] + [r[0] for r in EXTRA_ROOTS]
        while todo:
            pkg = todo.pop()
            if pkg in done:
                continue
            done.add(pkg)
            d = self.pkg_dir(src, pkg)
            path = os.path.join(d, "generated.proto")
            if not os.path.exists(path):
                die("%s: missing (is %s a k8s.io directory?)" % (path, src))
            got, msgs = parse_proto(path)
            if got != pkg:
                die("%s declares package %s" % (path, got))
            go = parse_go_structs(d)
            for name, fields in msgs.items():
                fq = pkg + "." + name
                for num, (label, typ, fname, key) in fields.items():
                    if typ not in SCALARS:
                        typ = typ.lstrip(".")
                        if "." not in typ:
                            typ = pkg + "." + typ
                        tpkg = typ.rsplit(".", 1)[0]
                        if tpkg not in done:
                            todo.append(tpkg)
                    self.add_field(fq, num, (label, typ, fname, key))
                self.msgs.setdefault(fq, {})
                self.latest[fq] = set(fields)
                if name in go:
                    self.go[fq] = merge_go(self.go.get(fq, []), go[name])

    def add_field(self, fq, num, f):
        cur = self.msgs.setdefault(fq, {})
        old = cur.get(num)
        if old is None:
            cur[num] = f
            return
        if old == f:
            return
        # A renamed field keeps its wire format (JSON names come from the Go tags).
        if old[0] == f[0] and old[1] == f[1] and old[3] == f[3]:
            self.notes.append("%s field %d: named %s -> %s" % (fq, num, old[2], f[2]))
            cur[num] = f
            return
        if old[0] == f[0] and old[2] == f[2] and old[3] == f[3] and \
                (fq, num, old[1], f[1]) in WIRE_RENAMES:
            self.notes.append("%s.%s: %s -> %s" % (fq, f[2], old[1].rsplit(".", 1)[1],
                                                       f[1].rsplit(".", 1)[1]))
            cur[num] = f
            return
        die("%s field %d: %s in one source, %s in another" % (fq, num, old, f))


# ---- reachable messages and their C rows ----------------------------------------------

def roots():
    out = []
    for pkg, apiv, kinds in WITH_LISTS:
        for k in kinds:
            out.append((pkg, k, apiv, k))
            out.append((pkg, k + "List", apiv, k + "List"))
    return out + EXTRA_ROOTS


def check_special(model, fq):
    kind, want = SPECIAL[fq]
    got = {n: (f[2], f[1]) for n, f in model.msgs.get(fq, {}).items()}
    if got != want:
        die("%s: fields %s, the C code expects %s" % (fq, got, want))
    return kind


def collect(model):
    order = []
    seen = set()

    def visit(fq):
        if fq in seen or fq in SPECIAL:
            return
        if fq not in model.msgs:
            die("message %s not found" % fq)
        seen.add(fq)
        order.append(fq)
        for num in sorted(model.msgs[fq]):
            typ = model.msgs[fq][num][1]
            if typ not in SCALARS:
                visit(typ)

    for pkg, msg, _, _ in roots():
        visit(pkg + "." + msg)
    for fq in SPECIAL:
        check_special(model, fq)
    return order


def rows_of(model, fq, index):
    """The C rows of one message (by number) and its Go declaration order."""
    fields = model.msgs[fq]
    go = {g["num"]: g for g in model.go.get(fq, [])}
    if not go and fields:
        die("%s: no Go struct with protobuf tags next to its .proto" % fq)
    rows = []
    for num in sorted(fields):
        label, typ, name, key = fields[num]
        g = go.get(num)
        if g is None:
            die("%s: proto field %s = %d has no Go field" % (fq, name, num))
        if g["pbname"] not in (name, None):
            die("%s: field %d is %s in .proto but %s in the Go tag" % (fq, num, name, g["pbname"]))
        flags = []
        if label == "repeated":
            flags.append("KL_PBF_REPEATED")
        if label == "map":
            flags.append("KL_PBF_MAP")
            if key != "string":
                die("%s.%s: map key %s (only string keys are handled)" % (fq, name, key))
        if g["ptr"]:
            if label != "optional":
                die("%s.%s: pointer to a repeated field" % (fq, name))
            flags.append("KL_PBF_PTR")
        if g["omitempty"]:
            flags.append("KL_PBF_OMITEMPTY")
        if num not in model.latest[fq]:
            # Removed since (ObjectMeta.clusterName): read, and written back
            # only when an object has it, as the newest server never writes it.
            flags.append("KL_PBF_GONE")
        if g["omitzero"]:
            # Go 1.24's omitzero: handled for scalars and times, the only
            # places Kubernetes uses it so far.
            if label != "optional" or (typ not in SCALARS and typ not in
                                       (META + ".Time", META + ".MicroTime")):
                die("%s.%s: omitzero on a %s field" % (fq, name, typ))
            flags.append("KL_PBF_OMITZERO")
        if g["inline"]:
            if label != "optional" or g["ptr"] or typ in SCALARS or typ in SPECIAL:
                die("%s.%s: inline field that is not a struct" % (fq, name))
            flags.append("KL_PBF_INLINE")
        json = g["json"]
        if not json and not g["inline"]:
            json = g["go"]  # encoding/json's default: the Go field name
        if typ in SCALARS:
            kind, msg = SCALARS[typ], 0
        elif typ in SPECIAL:
            kind, msg = SPECIAL[typ][0], 0
            if kind is None:
                die("%s.%s: %s has no kind in proto.c yet" % (fq, name, typ))
        else:
            kind, msg = "KL_PB_MSG", index[typ]
        rows.append((num, json, kind, " | ".join(flags) or "0", msg))
    decl = [g["num"] for g in model.go.get(fq, []) if g["num"] in fields]
    by_num = sorted(fields)
    return rows, [by_num.index(n) for n in decl]


def render(model, srcs):
    order = collect(model)
    index = {fq: i for i, fq in enumerate(order)}
    out = []
    w = out.append
    w("/*")
    w(" * Generated by hack/kube-lite/gen-proto-tables.py; do not edit. Read from the")
    w(" * generated.proto files and Go types of k8s.io/api and k8s.io/apimachinery in:")
    for s in srcs:
        w(" *   %s" % s)
    w(" * Regenerate with")
    w(" *   hack/kube-lite/gen-proto-tables.py 'LABEL1=DIR1' 'LABEL2=DIR2'")
    w(" * (the labels above; the script's header says where the directories come from).")
    if model.notes:
        w(" * Changed between sources, same wire format:")
    for n in model.notes:
        w(" *   %s" % n.replace("k8s.io.api.", "").replace("k8s.io.apimachinery.pkg.", ""))
    gone = [".".join(fq.split(".")[-3:] + [model.msgs[fq][n][2]])
            for fq in order for n in sorted(model.msgs[fq]) if n not in model.latest[fq]]
    if gone:
        w(" * Gone from the newest source (KL_PBF_GONE, written only when an object has them):")
        w(" *   " + ", ".join(gone))
    w(" *")
    w(" * kl_pb_fields: every message's fields by number; kl_pb_order: each message's")
    w(" * fields in Go declaration order (indices relative to its first field);")
    w(" * kl_pb_msgs: the messages; kl_pb_roots: the kinds with an apiVersion.")
    w(" */")
    w('#include "kube-lite/kl.h"')
    w("")
    w("const kl_pb_field kl_pb_fields[] = {")
    msgs = []
    orders = []
    first = 0
    for fq in order:
        rows, decl = rows_of(model, fq, index)
        w("    /* %d %s */" % (index[fq], fq))
        for num, json, kind, flags, msg in rows:
            w('    {%d, %d, %s, %s, "%s"},' % (num, msg, kind, flags, json))
        msgs.append((fq, first, len(rows), len(orders)))
        orders.extend(decl)
        first += len(rows)
    w("};")
    w("")
    w("const uint8_t kl_pb_order[] = {")
    w("    " + ", ".join(str(i) for i in orders) + ",")
    w("};")
    w("")
    w("const kl_pb_msg kl_pb_msgs[] = {")
    for fq, f, n, o in msgs:
        w('    {"%s", %d, %d, %d},' % (fq.rsplit(".", 1)[1], f, n, o))
    w("};")
    w("const size_t kl_pb_n_msgs = sizeof(kl_pb_msgs) / sizeof(kl_pb_msgs[0]);")
    w("")
    w("const kl_pb_root kl_pb_roots[] = {")
    for pkg, msg, apiv, kind in roots():
        a = '"%s"' % apiv if apiv else "NULL"
        w('    {%s, "%s", %d},' % (a, kind, index[pkg + "." + msg]))
    w("};")
    w("const size_t kl_pb_n_roots = sizeof(kl_pb_roots) / sizeof(kl_pb_roots[0]);")
    if len(order) > 65535 or first > 65535 or any(n > 255 for _, _, n, _ in msgs):
        die("tables outgrew their index types")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", default=os.path.join(os.path.dirname(__file__),
                                                           "proto_tables.c"))
    ap.add_argument("src", nargs="+", help="[LABEL=]DIR: k8s.io directories, oldest first; "
                    "LABEL names the source in the output's header")
    args = ap.parse_args()
    model = Model()
    labels = []
    for src in args.src:
        label, _, d = src.rpartition("=")
        model.load(d)
        labels.append(label or os.path.abspath(d))
    text = render(model, labels)
    cf = shutil.which("clang-format")
    if cf:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        text = subprocess.run([cf, "--style=file", "--assume-filename=" +
                               os.path.join(root, "hack/kube-lite/proto_tables.c")],
                              input=text, capture_output=True, text=True, check=True,
                              cwd=root).stdout
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
