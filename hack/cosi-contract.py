#!/usr/bin/env python3
"""Prints the wire contract of a proto3 text as sorted facts, one per line.

    hack/cosi-contract.py FILE               facts of FILE on stdout
    hack/cosi-contract.py --check FILE FACTS exit 1 (with a diff) if they differ

FILE is a .proto file, or any text with one embedded: a spec page that shows
the whole file among prose. Then the proto is the first run of statements
that starts at the `syntax` line, and it ends at the first line that is not
a proto statement; snippets shown later on the page are not part of it (their
names are listed on stderr so a reader can see what was left out).

Facts name everything by its full name, so their order in the file does not
matter. Kinds (tests/unit/test_cosi_proto.c prints the same from the
protobuf-c descriptors, all but the ones marked *):

    file package P
    file syntax S | file import PATH | file option NAME VALUE          *
    message M
    message M field NAME NUMBER TYPE LABEL
    message M oneof NAME field NAME
    enum E
    enum E value NAME NUMBER
    service S
    service S method NAME INPUT -> OUTPUT
    service S method NAME streaming none|client|server|both            *
    extend TARGET field NAME NUMBER TYPE LABEL                          *
    ... option NAME VALUE, message M reserved ...                       *

TYPE is a scalar type name, a full message or enum name, or map<K,V>.
LABEL is `optional` for a singular field (proto3's default, oneof members
too), `proto3_optional` for one declared with the optional keyword,
`repeated` for lists and maps, `required` in proto2 text.

Only what the grammar of the contract needs is understood: no groups, no
editions. Anything else is an error with a line number, never a silent skip.
"""

import difflib
import re
import sys

SCALARS = {
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
    "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
}
TOP_LEVEL = {"syntax", "package", "import", "option", "message", "enum", "service", "extend", ";"}

TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<comment>//[^\n]*|/\*.*?\*/)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<number>-?(?:0[xX][0-9a-fA-F]+|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?))
      | (?P<ident>\.?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
      | (?P<other>.)""",
    re.X | re.S,
)


class ProtoError(Exception):
    pass


class Tokens:
    """Lazy tokenizer: text after the end of an embedded proto is never read."""

    def __init__(self, text, start):
        self.text = text
        self.pos = start
        self.lineno = text.count("\n", 0, start) + 1
        self.buf = None

    def _scan(self):
        while self.pos < len(self.text):
            m = TOKEN.match(self.text, self.pos)
            self.pos = m.end()
            line = self.lineno
            self.lineno += m.group().count("\n")
            if m.lastgroup not in ("space", "comment"):
                return (m.group(), m.lastgroup, line)
        return (None, "eof", self.lineno)

    def peek(self):
        if self.buf is None:
            self.buf = self._scan()
        return self.buf

    def next(self):
        tok = self.peek()
        self.buf = None
        return tok

    def expect(self, want=None, kind=None):
        value, k, line = self.next()
        if (want is not None and value != want) or (kind is not None and k != kind):
            raise ProtoError(f"line {line}: expected {want or kind}, got {value!r}")
        return value

    def accept(self, want):
        if self.peek()[0] == want:
            self.next()
            return True
        return False

    def line(self):
        return self.peek()[2]


class Parser:
    def __init__(self, toks):
        self.t = toks
        self.package = ""
        self.facts = []
        self.types = set()  # full names of messages and enums
        self.pending = []  # (fact template, type name, scope) resolved at the end

    # ---- helpers ------------------------------------------------------------

    def full(self, scope, name):
        return f"{scope}.{name}" if scope else name

    def constant(self):
        """An option value: scalars as written, aggregates in braces kept raw."""
        value, kind, line = self.t.next()
        if value == "{":
            depth, parts = 1, ["{"]
            while depth:
                v, k, _ = self.t.next()
                if k == "eof":
                    raise ProtoError(f"line {line}: unterminated option value")
                depth += {"{": 1, "}": -1}.get(v, 0)
                parts.append(v)
            return "".join(parts)
        if value in ("-", "+"):
            value += self.t.next()[0]
        elif kind == "string":
            while self.t.peek()[1] == "string":  # "a" "b" is one string
                value = value[:-1] + self.t.next()[0][1:]
        elif kind not in ("number", "ident"):
            raise ProtoError(f"line {line}: bad option value {value!r}")
        return value

    def option_name(self):
        if self.t.accept("("):
            name = "(" + self.t.expect(kind="ident") + ")"
            self.t.expect(")")
        else:
            name = self.t.expect(kind="ident")
        while self.t.peek()[1] == "ident" and self.t.peek()[0].startswith("."):
            name += self.t.next()[0]
        return name

    def option_stmt(self, prefix):
        # "option" already taken
        name = self.option_name()
        self.t.expect("=")
        self.facts.append(f"{prefix} option {name} {self.constant()}")
        self.t.expect(";")

    def bracket_options(self, prefix):
        if not self.t.accept("["):
            return
        while True:
            name = self.option_name()
            self.t.expect("=")
            self.facts.append(f"{prefix} option {name} {self.constant()}")
            if self.t.accept("]"):
                return
            self.t.expect(",")

    def type_ref(self, scope, name):
        """Placeholder for a type name, resolved once every type is known."""
        if name in SCALARS:
            return name
        self.pending.append((name, scope))
        return "\0" + str(len(self.pending) - 1) + "\0"

    def resolve(self, name, scope):
        if name.startswith("."):
            return name[1:]
        parts = scope.split(".") if scope else []
        while True:
            cand = ".".join(parts + [name])
            if cand in self.types:
                return cand
            if not parts:
                break
            parts.pop()
        if "." in name:
            return name  # from an import (google.protobuf.*): kept as written
        raise ProtoError(f"unknown type {name!r} in {scope or 'file scope'}")

    def number(self):
        value, kind, line = self.t.next()
        if kind != "number":
            raise ProtoError(f"line {line}: expected a number, got {value!r}")
        return int(value, 0)

    # ---- declarations ---------------------------------------------------------

    def field(self, owner, scope, in_oneof=None):
        """A field of a message, oneof or extend block; owner prefixes its facts."""
        line = self.t.line()
        label = "optional"
        if self.t.peek()[0] in ("repeated", "optional", "required") and not in_oneof:
            word = self.t.next()[0]
            label = {"optional": "proto3_optional" if self.syntax == "proto3" else "optional"}.get(
                word, word
            )
        if self.t.accept("map"):
            if in_oneof:
                raise ProtoError(f"line {line}: map field in a oneof")
            self.t.expect("<")
            key = self.t.expect(kind="ident")
            self.t.expect(",")
            value = self.t.expect(kind="ident")
            self.t.expect(">")
            if key not in SCALARS or key in ("float", "double", "bytes"):
                raise ProtoError(f"line {line}: bad map key type {key!r}")
            ftype = f"map<{key},{self.type_ref(scope, value)}>"
            label = "repeated"
        else:
            tname = self.t.expect(kind="ident")
            if tname == "group":
                raise ProtoError(f"line {line}: groups are not supported")
            ftype = self.type_ref(scope, tname)
        name = self.t.expect(kind="ident")
        if owner.startswith("extend "):
            name = self.full(self.package if not scope else scope, name)
        self.t.expect("=")
        num = self.number()
        self.facts.append(f"{owner} field {name} {num} {ftype} {label}")
        self.bracket_options(f"{owner} field {name}")
        self.t.expect(";")
        if in_oneof:
            self.facts.append(f"{owner} oneof {in_oneof} field {name}")

    def reserved(self, prefix):
        parts = []
        while not self.t.accept(";"):
            v, k, line = self.t.next()
            if k == "eof":
                raise ProtoError(f"line {line}: unterminated reserved")
            parts.append(v)
        for item in " ".join(parts).split(","):
            self.facts.append(f"{prefix} reserved {item.strip()}")

    def message(self, scope):
        name = self.full(scope, self.t.expect(kind="ident"))
        self.declare(name)
        owner = f"message {name}"
        self.facts.append(owner)
        self.t.expect("{")
        while not self.t.accept("}"):
            word, kind, line = self.t.peek()
            if word == ";":
                self.t.next()
            elif word == "message":
                self.t.next()
                self.message(name)
            elif word == "enum":
                self.t.next()
                self.enum(name)
            elif word == "extend":
                self.t.next()
                self.extend(name)
            elif word == "option":
                self.t.next()
                self.option_stmt(owner)
            elif word in ("reserved", "extensions"):
                self.t.next()
                self.reserved(owner if word == "reserved" else owner + " extensions")
            elif word == "oneof":
                self.t.next()
                oneof = self.t.expect(kind="ident")
                self.t.expect("{")
                while not self.t.accept("}"):
                    if self.t.accept("option"):
                        self.option_stmt(f"{owner} oneof {oneof}")
                    elif not self.t.accept(";"):
                        self.field(owner, name, in_oneof=oneof)
            elif kind == "ident":
                self.field(owner, name)
            else:
                raise ProtoError(f"line {line}: unexpected {word!r} in message {name}")

    def enum(self, scope):
        name = self.full(scope, self.t.expect(kind="ident"))
        self.declare(name)
        owner = f"enum {name}"
        self.facts.append(owner)
        self.t.expect("{")
        while not self.t.accept("}"):
            if self.t.accept(";"):
                continue
            if self.t.accept("option"):
                self.option_stmt(owner)
                continue
            if self.t.accept("reserved"):
                self.reserved(owner)
                continue
            value = self.t.expect(kind="ident")
            self.t.expect("=")
            self.facts.append(f"{owner} value {value} {self.number()}")
            self.bracket_options(f"{owner} value {value}")
            self.t.expect(";")

    def service(self):
        name = self.full(self.package, self.t.expect(kind="ident"))
        owner = f"service {name}"
        self.facts.append(owner)
        self.t.expect("{")
        while not self.t.accept("}"):
            if self.t.accept(";"):
                continue
            if self.t.accept("option"):
                self.option_stmt(owner)
                continue
            self.t.expect("rpc")
            method = self.t.expect(kind="ident")
            ends = []
            for i, sep in enumerate((None, "returns")):
                if sep:
                    self.t.expect(sep)
                self.t.expect("(")
                stream = self.t.accept("stream")
                ends.append((stream, self.type_ref(self.package, self.t.expect(kind="ident"))))
                self.t.expect(")")
            prefix = f"{owner} method {method}"
            self.facts.append(f"{prefix} {ends[0][1]} -> {ends[1][1]}")
            streaming = {(False, False): "none", (True, False): "client", (False, True): "server"}
            self.facts.append(
                f"{prefix} streaming {streaming.get((ends[0][0], ends[1][0]), 'both')}"
            )
            if self.t.accept("{"):
                while not self.t.accept("}"):
                    if not self.t.accept(";"):
                        self.t.expect("option")
                        self.option_stmt(prefix)
            else:
                self.t.expect(";")

    def extend(self, scope):
        target = self.type_ref(scope or self.package, self.t.expect(kind="ident"))
        self.t.expect("{")
        while not self.t.accept("}"):
            if not self.t.accept(";"):
                self.field(f"extend {target}", scope)

    def declare(self, name):
        if name in self.types:
            raise ProtoError(f"line {self.t.line()}: {name} declared twice")
        self.types.add(name)

    # ---- file -------------------------------------------------------------------

    def file(self, embedded):
        self.syntax = "proto2"
        while True:
            word, kind, line = self.t.peek()
            if kind == "eof":
                break
            if word not in TOP_LEVEL:
                if embedded:
                    break  # prose after the proto
                raise ProtoError(f"line {line}: unexpected {word!r} at file level")
            self.t.next()
            if word == "syntax":
                self.t.expect("=")
                self.syntax = self.t.expect(kind="string").strip("\"'")
                self.t.expect(";")
                self.facts.append(f"file syntax {self.syntax}")
            elif word == "package":
                self.package = self.t.expect(kind="ident")
                self.t.expect(";")
                self.facts.append(f"file package {self.package}")
            elif word == "import":
                if self.t.peek()[0] in ("public", "weak"):
                    self.t.next()
                path = self.t.expect(kind="string").strip("\"'")
                self.facts.append(f"file import {path}")
                self.t.expect(";")
            elif word == "option":
                self.option_stmt("file")
            elif word == "message":
                self.message(self.package)
            elif word == "enum":
                self.enum(self.package)
            elif word == "service":
                self.service()
            elif word == "extend":
                self.extend("")
        end_line = self.t.line()
        out = []
        for fact in self.facts:
            parts = fact.split("\0")
            for i in range(1, len(parts), 2):
                parts[i] = self.resolve(*self.pending[int(parts[i])])
            out.append("".join(parts))
        return sorted(out), end_line


def facts_of(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^[ \t]*syntax\s*=\s*[\"']proto[23][\"']", text, re.M)
    if not m:
        raise ProtoError(f"{path}: no `syntax = \"proto3\";` line")
    before = re.sub(r"//[^\n]*|/\*.*?\*/", "", text[: m.start()], flags=re.S)
    embedded = before.strip() != ""
    start_line = text.count("\n", 0, m.start()) + 1
    facts, end_line = Parser(Tokens(text, m.start())).file(embedded)
    if embedded:
        lines = text.splitlines()
        later = []
        for line in lines[end_line - 1 :]:
            d = re.match(r"\s*(message|enum|service)\s+([A-Za-z_]\w*)\s*\{", line)
            if d:
                later.append(d.group(2))
        note = f"{path}: proto taken from lines {start_line}-{end_line - 1}"
        if later:
            note += "; later snippets not in the contract: " + ", ".join(later)
        print(note, file=sys.stderr)
    return facts


def main(argv):
    try:
        if len(argv) == 2 and not argv[1].startswith("-"):
            sys.stdout.write("".join(f + "\n" for f in facts_of(argv[1])))
            return 0
        if len(argv) == 4 and argv[1] == "--check":
            got = facts_of(argv[2])
            with open(argv[3], encoding="utf-8") as f:
                want = [line for line in f.read().splitlines() if line]
            if got == want:
                print(f"{argv[2]}: {len(got)} facts, same as {argv[3]}")
                return 0
            sys.stdout.writelines(
                difflib.unified_diff(
                    [w + "\n" for w in want], [g + "\n" for g in got], argv[3], argv[2], n=0
                )
            )
            print(f"{argv[2]}: contract differs from {argv[3]}")
            return 1
    except (OSError, ProtoError) as e:
        print(f"cosi-contract: {e}", file=sys.stderr)
        return 2
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
