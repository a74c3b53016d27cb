#!/usr/bin/env python3
"""One public path per item (issue 34: "do not re-export").

Reads the rustdoc HTML of the given crates (`cargo doc --no-deps`, under DOC_DIR) and fails
when an item of the crate is published at two paths. rustdoc writes a page for every path
where an item is public and inlined, each naming the item's source lines; two pages with the
same source lines are one item at two paths. A `pub use` of an item that is also public
where it is defined is not inlined: rustdoc lists it under "Re-exports", and that fails too,
except a re-export of another crate (`pub use rsmpi;`), which is that crate's one path here.

Usage: ci/public_paths.py DOC_DIR CRATE [CRATE ...]   (exit 1 with the doubles listed)
"""
import html
import os
import re
import sys

ITEM = re.compile(r"^(struct|enum|fn|trait|type|constant|static|macro|union|traitalias|derive|attr)\.[A-Za-z0-9_]+\.html$")
SRC = re.compile(r'<a class="src" href="((?:\.\./)*src/[^"#]+#[0-9-]+)"')
REEXPORTS = re.compile(r'id="reexports".*?</dl>', re.S)
CODE = re.compile(r"<code>(.*?)</code>", re.S)


def main(doc, crates):
    bad = []
    for crate in crates:
        root = os.path.join(doc, crate)
        if not os.path.isdir(root):
            print(f"public_paths.py: {root}: no rustdoc output (run cargo doc first)", file=sys.stderr)
            return 2
        by_source = {}
        for d, _, files in os.walk(root):
            for f in files:
                if f != "index.html" and not ITEM.match(f):
                    continue
                p = os.path.join(d, f)
                text = open(p, encoding="utf-8").read()
                rel = os.path.relpath(p, doc)
                path = "::".join(os.path.dirname(rel).split(os.sep))
                if f != "index.html":
                    path += "::" + f.split(".")[1]
                m = SRC.search(text)
                if m:
                    src = os.path.normpath(os.path.join(d, m.group(1).split("#")[0]))
                    by_source.setdefault((src, m.group(1).split("#")[1]), []).append(path)
                if f == "index.html":
                    r = REEXPORTS.search(text)
                    for item in CODE.findall(r.group(0)) if r else []:
                        item = re.sub("<[^>]+>", "", html.unescape(item)).strip()
                        target = item.removeprefix("pub use ").rstrip(";").split(" as ")[0]
                        first = target.split("::")[0]
                        if first in ("crate", "self", "super") or "::" in target:
                            bad.append(f"{path}: `{item}` re-exports an item public elsewhere")
        for (src, lines), paths in sorted(by_source.items()):
            if len(set(paths)) > 1:
                bad.append(f"{' and '.join(sorted(set(paths)))}: one item ({os.path.basename(src)}#{lines}) at two paths")
    for b in bad:
        print(f"public_paths.py: {b}")
    if bad:
        print(f"public_paths.py: {len(bad)} items with more than one public path", file=sys.stderr)
        return 1
    print(f"public_paths.py: {', '.join(crates)}: one public path per item")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3 or not os.path.isdir(sys.argv[1]):
        print("usage: ci/public_paths.py DOC_DIR CRATE [CRATE ...] (DOC_DIR: the rustdoc output,"
              " e.g. target/doc, an existing directory)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
