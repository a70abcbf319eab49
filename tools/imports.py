#!/usr/bin/env python3
"""Imports between the files of each crate: circles and imports that run up a floor.

The house rule (docs/ARCHITECTURE.md, "The folder tree"): imports only go down.
This tool measures how far the code is from it, per crate:

- a **circle** is a set of files that reach each other through imports (a strongly
  connected component of the file graph); a circle of more than `--max-circle` files
  (3 by default) fails the check;
- an import **runs up a floor** when a file imports from a module that contains it
  (`quorum/cluster.rs` using an item defined in `quorum.rs`, or in `lib.rs`); such an
  import inside the broker crate fails the check.

An edge goes to the file that *defines* the item: a name reached through a `use` in
another module (`pub use` re-exports in lib.rs, or a parent's private `use` that a child
reaches with `super::`) is followed to where it is defined. Modules declared under
`#[cfg(test)]` are left out: tests read their parent by design. Declaring a module
(`mod x;`) is not an import.

Usage: tools/imports.py [--crate NAME ...] [--max-circle N] [--check | --check-floors] [--verbose]
"""

import argparse
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def strip_comments_and_strings(text):
    """Code without comments, string and char literals (their text would look like paths)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or text.startswith("'\\u{", i):
            j = text.find("'", i + 1)
            i = j + 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_items(code):
    """Code without `#[cfg(test)]` items (modules, functions, impls, uses): tests read
    their parent and build fixtures from anywhere, by design."""
    pattern = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*")
    pos = 0
    while True:
        m = pattern.search(code, pos)
        if not m:
            return code
        i = m.end()
        brace, semi = code.find("{", i), code.find(";", i)
        if semi >= 0 and (brace < 0 or semi < brace):
            code = code[:m.start()] + code[semi + 1:]
            continue
        if brace < 0:
            return code
        depth, i = 1, brace + 1
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        code = code[:m.start()] + code[i:]


INLINE_BLOCK_RE = re.compile(r"(?!x)x")  # placeholder: inline blocks are cut by strip_inline_modules


def _inline_spans(code):
    """(name, start, body start, end) of each top-level inline `mod name { ... }`."""
    spans = []
    for m in INLINE_MOD_RE.finditer(code):
        if spans and m.start() < spans[-1][3]:
            continue  # nested inside the previous one: handled when that one is read
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        spans.append((m.group(2), m.start(), m.end(), i))
    return spans


def inline_modules(code):
    """[(name, body)] of the inline modules at the top of `code`."""
    return [(name, code[body:end - 1]) for name, _, body, end in _inline_spans(code)]


def strip_inline_modules(code):
    """`code` without its inline modules."""
    out, pos = [], 0
    for _, start, _, end in _inline_spans(code):
        out.append(code[pos:start])
        pos = end
    out.append(code[pos:])
    return "".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{D, E as F}, self}` -> ['a::b', 'a::c::D', 'a::c::E', 'a'] with aliases."""
    tree = re.sub(r"\s+", "", tree)
    results = []

    def walk(prefix, s):
        # split s at top-level commas
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        for part in parts:
            if not part:
                continue
            brace = part.find("{")
            if brace >= 0:
                head = part[:brace].rstrip(":")
                inner = part[brace + 1:part.rfind("}")]
                walk(prefix + [seg for seg in head.split("::") if seg], inner)
                continue
            alias = None
            segs_text = part
            segs = [s for s in segs_text.split("::") if s]
            if segs == ["self"]:
                results.append((prefix, alias))
            else:
                results.append((prefix + segs, alias))

    walk([], tree)
    return results


USE_RE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
MOD_RE = re.compile(r"(#\[cfg\(test\)\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")
INLINE_MOD_RE = re.compile(r"(#\[cfg\(test\)\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{")
PATH_RE = re.compile(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def use_items(code, reexports=True):
    """[(path segments, local name)] of every `use` in the code (aliases kept);
    `reexports=False` leaves out `pub use` (a re-export is not the file's own need)."""
    items = []
    for m in USE_RE.finditer(code):
        if m.group(1) and not reexports:
            continue
        raw = m.group(2)
        # keep aliases: turn `X as Y` into a marker before whitespace is dropped
        raw = re.sub(r"\s+as\s+([A-Za-z_][A-Za-z0-9_]*)", r"@\1", raw)
        for segs, _ in expand_use_tree(raw):
            if not segs:
                continue
            last = segs[-1]
            alias = None
            if "@" in last:
                last, alias = last.split("@", 1)
                segs = segs[:-1] + [last]
            if alias == "_":
                alias = None
            items.append((segs, alias or segs[-1]))
    return items


class Crate:
    def __init__(self, name, src):
        self.name = name
        self.src = src
        self.files = {}  # module path tuple -> file path
        self.test_modules = set()
        self.children = defaultdict(set)  # module path -> child module names (file or inline)
        self.inline = {}  # inline module path -> file path that holds it
        self.code = {}
        root = None
        for cand in ("lib.rs", "main.rs"):
            if os.path.exists(os.path.join(src, cand)):
                root = os.path.join(src, cand)
                break
        if root is None:
            raise SystemExit(f"{src}: no lib.rs or main.rs")
        self.load((), root, False)

    def load(self, modpath, path, is_test):
        self.files[modpath] = path
        if is_test:
            self.test_modules.add(modpath)
        code = drop_test_items(strip_comments_and_strings(open(path, encoding="utf-8").read()))
        self.code[modpath] = code
        base = os.path.basename(path)
        if base in ("lib.rs", "main.rs", "mod.rs"):
            folder = os.path.dirname(path)
        else:
            folder = os.path.join(os.path.dirname(path), base[:-3])
        for m in MOD_RE.finditer(code):
            name = m.group(2)
            child_test = is_test or bool(m.group(1))
            for cand in (os.path.join(folder, name + ".rs"), os.path.join(folder, name, "mod.rs")):
                if os.path.exists(cand):
                    self.children[modpath].add(name)
                    self.load(modpath + (name,), cand, child_test)
                    break
        for m in INLINE_MOD_RE.finditer(code):
            self.children[modpath].add(m.group(2))
            self.inline[modpath + (m.group(2),)] = path

    def file_of(self, modpath):
        while modpath not in self.files:
            if modpath in self.inline:
                return self.inline[modpath]
            modpath = modpath[:-1]
        return self.files[modpath]

    def absolute(self, here, segs):
        """Resolve `crate::`, `super::`, `self::` and child-module-relative paths."""
        segs = list(segs)
        if not segs:
            return None
        if segs[0] == "crate":
            return tuple(segs[1:])
        cur = tuple(here)
        if segs[0] in ("self", "super"):
            while segs and segs[0] in ("self", "super"):
                if segs[0] == "super":
                    cur = cur[:-1]
                segs.pop(0)
            return cur + tuple(segs)
        if segs[0] in self.children[here]:
            return cur + tuple(segs)
        return None  # an external crate or a name in scope

    def imports_of(self, modpath):
        """name -> absolute path for every `use` of a crate path in this module's file."""
        table = {}
        for segs, local in use_items(self.code[modpath]):
            absolute = self.absolute(modpath, segs)
            if absolute is not None and local != "*":
                table[local] = absolute
        return table

    def defining_module(self, path, depth=0):
        """The module whose file defines the item at `path` (following `use`s)."""
        mod = ()
        rest = list(path)
        while rest and rest[0] in self.children[mod]:
            mod = mod + (rest.pop(0),)
        if not rest or depth > 12:
            return mod
        name = rest[0]
        table = self._imports.get(mod)
        if table is None:
            table = self._imports[mod] = self.imports_of(mod)
        if name in table:
            target = table[name] + tuple(rest[1:])
            if target != tuple(path):
                return self.defining_module(target, depth + 1)
        return mod

    def paths_in(self, modpath, code):
        """Absolute paths named by `code` of module `modpath`, inline modules included (their
        `super` is the module around them)."""
        paths = []
        for name, inner in inline_modules(code):
            paths += self.paths_in(modpath + (name,), inner)
        code = INLINE_BLOCK_RE.sub("", strip_inline_modules(code))
        for segs, _ in use_items(code, reexports=False):
            absolute = self.absolute(modpath, segs)
            if absolute is not None:
                paths.append(absolute)
        body = USE_RE.sub("", code)
        for m in PATH_RE.finditer(body):
            absolute = self.absolute(modpath, m.group(1).split("::"))
            if absolute is not None:
                paths.append(absolute)
        return paths

    def edges(self):
        self._imports = {}
        graph = defaultdict(set)
        for modpath in self.files:
            if modpath in self.test_modules:
                continue
            src = self.files[modpath]
            paths = self.paths_in(modpath, self.code[modpath])
            for absolute in paths:
                target_mod = self.defining_module(absolute)
                if any(target_mod[:len(t)] == t for t in self.test_modules):
                    continue
                target = self.file_of(target_mod)
                if target != src:
                    graph[src].add(target)
        return graph

    def module_of_file(self):
        return {path: mod for mod, path in self.files.items()}


def circles(graph, nodes):
    """Strongly connected components with more than one file (Tarjan, iterative)."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    result.append(sorted(comp))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--crate", action="append", help="crate folder under crates/ (all by default)")
    parser.add_argument("--max-circle", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="exit 1 when a rule is broken")
    parser.add_argument("--check-floors", action="store_true",
                        help="exit 1 only when an import inside the broker runs up a floor")
    parser.add_argument("--verbose", action="store_true", help="list every import up a floor")
    args = parser.parse_args()
    crates_dir = os.path.join(ROOT, "crates")
    names = args.crate or sorted(d for d in os.listdir(crates_dir) if os.path.isdir(os.path.join(crates_dir, d, "src")))
    failed = floors_failed = False
    for name in names:
        crate = Crate(name, os.path.join(crates_dir, name, "src"))
        graph = crate.edges()
        mods = crate.module_of_file()
        rel = lambda p: os.path.relpath(p, crate.src)
        prod = [p for m, p in crate.files.items() if m not in crate.test_modules]
        comps = circles(graph, prod)
        up = []
        for src, targets in graph.items():
            for dst in targets:
                a, b = mods[src], mods[dst]
                if len(b) < len(a) and a[:len(b)] == b:
                    up.append((rel(src), rel(dst)))
        biggest = max((len(c) for c in comps), default=0)
        print(f"{name}: {len(prod)} files, largest circle {biggest}, {len(up)} imports up a floor")
        for comp in sorted(comps, key=len, reverse=True):
            print(f"  circle of {len(comp)}: " + ", ".join(rel(p) for p in comp))
        if args.verbose:
            for a, b in sorted(up):
                print(f"  up: {a} -> {b}")
        if biggest > args.max_circle or (name == "broker" and up):
            failed = True
        if name == "broker" and up:
            floors_failed = True
    if (args.check and failed) or (args.check_floors and floors_failed):
        sys.exit(1)


if __name__ == "__main__":
    main()
