"""Draws docs/images/architecture.png, the picture of docs/ARCHITECTURE.md, from the tree itself:
the wings of tests/layering_check.sh's table (each a box in its layer, with its modules and lines
of code), and one arrow from a wing to each other wing that a file of it #includes a header of
(header names are unique in the tree; a name with a '/' is a system header). Server wings stand
on the left, client wings on the right, and both meet on sys/ and proto/ below.

Also writes docs/images/architecture-graph.txt, the text form of what it drew (wings, their
modules, the edges between wings), which tests/integration/test_architecture_doc.sh compares with
a fresh one: when the tree changes, rerun

    /usr/bin/python3 docs/images/architecture_picture.py

(--text-only writes only the text form and needs no PIL; --graph FILE writes it elsewhere;
--root DIR reads another tree.) Needs PIL (Debian's python3-pil) for the picture."""
import argparse
import fnmatch
import os
import re
import sys

SIDES = ("server", "shared", "client")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def read_table(root):
    """The wing table of tests/layering_check.sh: [(wing, [globs], [may include])], in order."""
    text = open(os.path.join(root, "tests", "layering_check.sh")).read()
    m = re.search(r"^table='\n(.*?)^'", text, re.S | re.M)
    if not m:
        sys.exit("architecture_picture: no table='...' in tests/layering_check.sh")
    rows = []
    for line in m.group(1).splitlines():
        fields = line.split()
        if not fields:
            continue
        globs = [f for f in fields[1:] if "/" in f]
        may = [f for f in fields[1:] if "/" not in f and f != "-"]
        rows.append((fields[0], globs, may))
    return rows


def wing_of(rows, rel):
    """The first row whose glob matches (as the check's [[ == ]]: '*' spans folders)."""
    for wing, globs, _ in rows:
        if any(fnmatch.fnmatchcase(rel, g) for g in globs):
            return wing
    return None


def scan(root, rows):
    """files[wing] = [(rel, lines)], edges = {(from, to)}, and header name -> path."""
    paths = []
    for top in ("proto", "sys", "server", "client"):
        for d, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            for n in names:
                rel = os.path.relpath(os.path.join(d, n), root)
                if n.endswith((".c", ".h")) and "/python/dscache/" not in "/" + rel:
                    paths.append(rel)
    paths.sort()
    header_of = {}
    for rel in paths:
        if rel.endswith(".h"):
            name = os.path.basename(rel)
            if name in header_of:
                sys.exit("architecture_picture: two headers named %s: %s and %s" %
                         (name, header_of[name], rel))
            header_of[name] = rel
    files = {w: [] for w, _, _ in rows}
    edges = set()
    for rel in paths:
        wing = wing_of(rows, rel)
        if wing is None:
            sys.exit("architecture_picture: %s belongs to no wing of tests/layering_check.sh" % rel)
        with open(os.path.join(root, rel), errors="replace") as f:
            lines = f.read().splitlines()
        files[wing].append((rel, len(lines)))
        for line in lines:
            m = INCLUDE_RE.match(line)
            if not m or "/" in m.group(1) or m.group(1) not in header_of:
                continue
            target = wing_of(rows, header_of[m.group(1)])
            if target != wing:
                edges.add((wing, target))
    return files, edges


def modules(entries):
    """[(module, lines)]: a module is a .c with its headers (X.c, X.h, X_int.h), or a lone .h."""
    mods = {}
    stems = {os.path.basename(r)[:-2] for r, _ in entries if r.endswith(".c")}
    for rel, n in entries:
        stem = os.path.basename(rel)[:-2]
        if stem.endswith("_int") and stem[:-4] in stems:
            stem = stem[:-4]
        prefix = os.path.dirname(rel)
        key = (prefix, stem)
        mods[key] = mods.get(key, 0) + n
    return mods


def side_of(globs):
    tops = {g.split("/")[0] for g in globs}
    if tops == {"server"}:
        return "server"
    if tops == {"client"}:
        return "client"
    return "shared"


def levels(rows):
    """A wing's layer: 0 for one that may include nothing, else one above the highest it may."""
    may = {w: m for w, _, m in rows}
    memo = {}

    def level(w, seen=()):
        if w not in memo:
            if w in seen:
                sys.exit("architecture_picture: the table's wings include each other: %s" % w)
            memo[w] = 1 + max((level(x, seen + (w,)) for x in may[w]), default=-1)
        return memo[w]

    return {w: level(w) for w, _, _ in rows}


def graph_text(rows, files, edges):
    out = ["# The wings of tests/layering_check.sh as docs/images/architecture.png draws them:",
           "# made by docs/images/architecture_picture.py from the tree (the table, the .c/.h",
           "# files, their #include lines). tests/integration/test_architecture_doc.sh compares",
           "# it with a fresh one; when they differ, rerun the script. Lines of code are drawn",
           "# in the picture but not kept here (they change with every edit).", ""]
    for wing, globs, may in rows:
        out.append("wing %s: %s (%s); may include: %s" %
                   (wing, " ".join(globs), side_of(globs), " ".join(may) or "-"))
        mods = modules(files[wing])
        for prefix in sorted({p for p, _ in mods}):
            out.append("  %s/: %s" % (prefix, " ".join(sorted(s for p, s in mods if p == prefix))))
    out += ["", "# edges (a file of the first wing includes a header of the second):"]
    out += ["%s -> %s" % e for e in sorted(edges)]
    return "\n".join(out) + "\n"


def draw(rows, files, edges, path):
    from PIL import Image, ImageDraw, ImageFont

    def font(name, size):
        try:
            return ImageFont.truetype("/usr/share/fonts/truetype/dejavu/" + name, size)
        except OSError:
            return ImageFont.load_default()

    f_head, f_body, f_title = font("DejaVuSans-Bold.ttf", 15), font("DejaVuSans.ttf", 12), \
        font("DejaVuSans-Bold.ttf", 18)
    lvl = levels(rows)
    side = {w: side_of(g) for w, g, _ in rows}
    # Rows of the picture from the bottom: the shared wings first, each its own layer, then each
    # side's wings by their layer above the shared ones.
    shared_top = max((lvl[w] for w in side if side[w] == "shared"), default=0)
    row_of = {w: lvl[w] if side[w] == "shared" else shared_top + lvl[w] for w in side}
    nrows = max(row_of.values()) + 1
    W, pad, gap = 1500, 16, 70
    half = (W - 3 * pad) // 2
    colours = {"server": (222, 235, 250), "client": (226, 244, 226), "shared": (246, 238, 220)}
    edge_col = {"server": (40, 90, 170), "client": (40, 130, 60), "shared": (150, 110, 40)}

    def wrap(words, width, fnt):
        lines, cur = [], ""
        for wd in words:
            t = (cur + "  " + wd) if cur else wd
            if cur and fnt.getlength(t) > width:
                lines.append(cur)
                cur = wd
            else:
                cur = t
        return lines + ([cur] if cur else [])

    # Box widths and text per wing.
    boxes = {}
    for r in range(nrows):
        for s in SIDES:
            ws = [w for w, _, _ in rows if row_of[w] == r and side[w] == s]
            if not ws:
                continue
            if s == "shared":
                x0, span = pad + half // 2, half + pad
            else:
                x0, span = (pad if s == "server" else 2 * pad + half), half
            bw = (span - pad * (len(ws) - 1)) // len(ws)
            for i, w in enumerate(ws):
                total = sum(n for _, n in files[w])
                mods = modules(files[w])
                text = []
                globs = next(g for x, g, _ in rows if x == w)
                for prefix in sorted({p for p, _ in mods}):
                    words = ["%s %d" % (st, mods[(p, st)]) for p, st in sorted(mods)
                             if p == prefix]
                    text += wrap([prefix + "/:"] + words, bw - 16, f_body)
                text = wrap(["%d lines;" % total, "files:"] + globs, bw - 16, f_body) + text
                boxes[w] = {"x": x0 + i * (bw + pad), "w": bw, "row": r, "side": s,
                            "head": w, "text": text, "h": 30 + 16 * len(text) + 8}
    row_h = [max([b["h"] for b in boxes.values() if b["row"] == r], default=0)
             for r in range(nrows)]
    top = 70
    H = top + sum(row_h) + gap * (nrows - 1) + pad + 30
    y = H - pad - 30
    row_y = {}
    for r in range(nrows):
        y -= row_h[r]
        row_y[r] = y
        y -= gap
    for b in boxes.values():
        b["y"] = row_y[b["row"]] + (row_h[b["row"]] - b["h"])  # bottom-aligned in its row

    img = Image.new("RGB", (W, H), (255, 255, 255))
    d = ImageDraw.Draw(img)
    d.text((pad, 12), "dscache: the wings of tests/layering_check.sh and their #include edges",
           fill=(0, 0, 0), font=f_title)
    d.text((pad, H - 26), "an arrow: a file of the upper wing includes a header of the lower; "
           "box: the table's globs (first match wins), then per folder each module "
           "(.c with its headers) and its lines. Made by "
           "docs/images/architecture_picture.py", fill=(90, 90, 90), font=f_body)
    d.text((pad, top - 28), "server/ (dscached)", fill=edge_col["server"], font=f_head)
    d.text((2 * pad + half, top - 28), "client/ (libdscache, CLI, Python)",
           fill=edge_col["client"], font=f_head)

    # Arrows: leave a box's bottom edge and enter the other's top edge at points spread along
    # them, ordered by the other end's x so that arrows cross as little as possible.
    def cx(w):
        return boxes[w]["x"] + boxes[w]["w"] / 2

    outs = {w: sorted((t for f, t in edges if f == w), key=cx) for w in boxes}
    ins = {w: sorted((f for f, t in edges if t == w), key=cx) for w in boxes}
    heads = []
    for f, t in sorted(edges):
        bf, bt = boxes[f], boxes[t]
        i, n = outs[f].index(t), len(outs[f])
        x1 = bf["x"] + bf["w"] * (i + 1) / (n + 1)
        y1 = bf["y"] + bf["h"]
        j, m = ins[t].index(f), len(ins[t])
        x2 = bt["x"] + bt["w"] * (j + 1) / (m + 1)
        y2 = bt["y"]
        col = edge_col[bf["side"]]
        d.line([(x1, y1), (x2, y2)], fill=col, width=2)
        heads.append((x1, y1, x2, y2, col))
    # The boxes over the lines (a line passing behind a box goes on below it), the heads last.
    for w, b in boxes.items():
        d.rectangle([b["x"], b["y"], b["x"] + b["w"], b["y"] + b["h"]], fill=colours[b["side"]],
                    outline=(60, 60, 60), width=2)
        d.text((b["x"] + 8, b["y"] + 7), b["head"], fill=(0, 0, 0), font=f_head)
        for i, t in enumerate(b["text"]):
            d.text((b["x"] + 8, b["y"] + 30 + 16 * i), t, fill=(40, 40, 40), font=f_body)
    for x1, y1, x2, y2, col in heads:
        dx, dy = x2 - x1, y2 - y1
        length = max((dx * dx + dy * dy) ** 0.5, 1)
        ux, uy = dx / length, dy / length
        d.polygon([(x2, y2), (x2 - 10 * ux + 4 * uy, y2 - 10 * uy - 4 * ux),
                   (x2 - 10 * ux - 4 * uy, y2 - 10 * uy + 4 * ux)], fill=col)
    img.save(path, optimize=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(here)))
    ap.add_argument("--graph", help="where the text form goes "
                    "(default: docs/images/architecture-graph.txt of the root)")
    ap.add_argument("-o", help="the picture (default: docs/images/architecture.png of the root)")
    ap.add_argument("--text-only", action="store_true", help="write only the text form")
    args = ap.parse_args()
    rows = read_table(args.root)
    files, edges = scan(args.root, rows)
    graph = args.graph or os.path.join(args.root, "docs", "images", "architecture-graph.txt")
    with open(graph, "w") as f:
        f.write(graph_text(rows, files, edges))
    if not args.text_only:
        draw(rows, files, edges,
             args.o or os.path.join(args.root, "docs", "images", "architecture.png"))


if __name__ == "__main__":
    main()
