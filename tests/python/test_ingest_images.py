"""dscache ingest images (issue 18) on an ImageFolder tree written here with PIL: classes are the
sorted subfolder names and labels and order are torchvision's (nested folders, upper-case
extensions, a non-image file ignored); --encoded keeps each file's bytes; a corrupt JPEG fails the
ingest naming the file and leaves no dataset, or with --skip-bad is skipped and named in the
summary; --max-side re-encodes; --size HxW gives u8[3,H,W] within tolerance of PIL's resize +
center crop; the class list is in the manifest's meta. Read back through dscached + Loader."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
try:
    import numpy as np
    from PIL import Image
except ImportError:
    te.skip("numpy or PIL is missing")
import dscache  # noqa: E402
from image_ref import plan, reference  # noqa: E402

env = te.Env()
t = te.Checks()
CLI = os.path.join(te.BIN, "dscache")
root = os.path.join(env.dir, "folder")
rng = np.random.default_rng(7)


def picture(w, h):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255.0 / w, y * 255.0 / h, 128 + 60 * np.sin(x / 7.0)], -1)
    return Image.fromarray(np.clip(a + rng.normal(0, 4, a.shape), 0, 255).astype(np.uint8))


layout = {  # class -> [(relative path, format, size)]
    "dog": [("d1.jpg", "JPEG", (64, 48)), ("sub/d0.png", "PNG", (40, 60)),
            ("d0.JPG", "JPEG", (80, 50))],
    "cat": [("c1.webp", "WEBP", (50, 50)), ("c0.jpeg", "JPEG", (120, 90))],
    "Zebra": [("z.png", "PNG", (30, 70))],
}
for cls, files in layout.items():
    for rel, fmt, size in files:
        p = os.path.join(root, cls, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        picture(*size).save(p, fmt, **({"quality": 92} if fmt != "PNG" else {}))
open(os.path.join(root, "cat", "notes.txt"), "w").write("not an image\n")


def torchvision_order(root):
    """torchvision.datasets.ImageFolder's classes and (path, label) list, written out."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    samples = []
    for label, cls in enumerate(classes):
        for r, _, names in sorted(os.walk(os.path.join(root, cls), followlinks=True)):
            for n in sorted(names):
                if n.lower().endswith((".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif",
                                       ".tiff", ".webp")):
                    samples.append((os.path.join(r, n), label))
    return classes, samples


def ingest(out, *args):
    return subprocess.run([CLI, "ingest", "images", root, "-o", out] + list(args),
                          capture_output=True, text=True)


def read_all(ds, name, decode=None, **kw):
    """Every sample of ds through a server and the loader: {index: {field: value}}."""
    _, addr = env.start_server(ds)
    loader = dscache.Loader(servers=addr, dataset=name, batch_size=4, seed=0, rank=0,
                            world_size=1, drop_last=False, indices=True, **kw)
    got = {}
    for batch in loader:
        idx = np.asarray(batch["__index__"]).astype(np.int64)
        labels = np.asarray(batch["label"])
        img = np.asarray(batch["image"])
        offs = np.asarray(batch["image_offsets"]) if "image_offsets" in batch else None
        for k, i in enumerate(idx):
            value = img[offs[k]:offs[k + 1]].tobytes() if offs is not None else img[k].copy()
            got[int(i)] = {"label": int(labels[k]), "image": value}
    loader.close()
    return got


classes, expected = torchvision_order(root)
t.check(classes == ["Zebra", "cat", "dog"], "classes %s" % classes)

# ---- --encoded: bytes, labels and order as torchvision's ---------------------------------
enc = os.path.join(env.dir, "enc")
r = ingest(enc, "--encoded", "--name", "enc", "--threads", "2")
t.check(r.returncode == 0, "ingest --encoded: %s" % r.stderr)
t.check("6 images of 3 classes" in r.stdout, "summary: %r" % r.stdout)
manifest = json.load(open(os.path.join(enc, "manifest.json")))
t.check(manifest.get("meta", {}).get("classes") == classes, "meta: %s" % manifest.get("meta"))
got = read_all(enc, "enc")
t.check(len(got) == len(expected), "%d samples, expected %d" % (len(got), len(expected)))
for i, (path, label) in enumerate(expected):
    s = got.get(i)
    t.check(s is not None and s["label"] == label, "sample %d (%s): label %s, expected %d"
            % (i, path, s and s["label"], label))
    t.check(s is not None and s["image"] == open(path, "rb").read(),
            "sample %d (%s): bytes differ from the file" % (i, path))

# ---- a corrupt JPEG: an error naming the file, no dataset; --skip-bad counts it ---------
bad = os.path.join(root, "dog", "broken.jpg")
open(bad, "wb").write(open(os.path.join(root, "dog", "d1.jpg"), "rb").read()[:300])
out = os.path.join(env.dir, "bad")
r = ingest(out, "--encoded")
t.check(r.returncode == 1, "corrupt JPEG: exit %d" % r.returncode)
t.check(bad in r.stderr and "decode" in r.stderr, "error names the file: %r" % r.stderr)
t.check(not os.path.exists(os.path.join(out, "manifest.json")), "no dataset after the failure")
r = ingest(out, "--encoded", "--skip-bad")
t.check(r.returncode == 0, "--skip-bad: %s" % r.stderr)
t.check("skipped 1 images" in r.stdout and bad in r.stdout, "summary names it: %r" % r.stdout)
m = json.load(open(os.path.join(out, "manifest.json")))
t.check(sum(s["samples"] for s in m["shards"]) == len(expected), "skip-bad: 6 samples kept")
# The skipped file and the map back to ImageFolder indices are in the dataset (meta "skipped"),
# and inspect shows them: sample i is ImageFolder[j], j the i-th index not skipped.
_, with_bad = torchvision_order(root)
bad_index = [p for p, _ in with_bad].index(bad)
sk = m.get("meta", {}).get("skipped", {})
t.check(sk.get("count") == 1 and sk.get("source_images") == len(with_bad)
        and sk.get("indices") == [bad_index], "meta skipped: %s" % sk)
t.check(sk.get("files", [{}])[0].get("path") == "dog/broken.jpg"
        and "decode" in sk["files"][0].get("error", ""), "meta skipped files: %s" % sk.get("files"))
keep = np.delete(np.arange(sk.get("source_images", 0)), sk.get("indices", []))
got = read_all(out, "bad")
for i in range(len(keep)):
    path = with_bad[keep[i]][0]
    t.check(i in got and got[i]["image"] == open(path, "rb").read(),
            "skip-bad: sample %d maps back to ImageFolder[%d] (%s)" % (i, keep[i], path))
r = subprocess.run([CLI, "inspect", out], capture_output=True, text=True)
t.check("skipped   1 of %d source images" % len(with_bad) in r.stdout
        and "[%d] dog/broken.jpg: " % bad_index in r.stdout, "inspect shows them: %r" % r.stdout)
# an existing dataset is replaced only with --replace (--force is the same)
r = ingest(out, "--encoded", "--skip-bad")
t.check(r.returncode == 1 and "--replace" in r.stderr and out in r.stderr,
        "existing output: %r" % r.stderr)
r = ingest(out, "--encoded", "--skip-bad", "--replace")
t.check(r.returncode == 0, "--replace: %s" % r.stderr)
r = ingest(out, "--encoded", "--skip-bad", "--force")
t.check(r.returncode == 0, "--force: %s" % r.stderr)
os.unlink(bad)

# ---- --max-side: re-encoded, longer side at most N --------------------------------------
small = os.path.join(env.dir, "small")
r = ingest(small, "--encoded", "--max-side", "40", "--name", "small")
t.check(r.returncode == 0, "--max-side: %s" % r.stderr)
import io  # noqa: E402
for i, s in read_all(small, "small").items():
    im = Image.open(io.BytesIO(s["image"]))
    t.check(max(im.size) <= 40, "sample %d: %s after --max-side 40" % (i, im.size))

# ---- --size HxW: decoded u8[3,H,W] close to PIL resize + center crop -------------------
dec = os.path.join(env.dir, "dec")
r = ingest(dec, "--size", "32x48", "--name", "dec")
t.check(r.returncode == 0, "--size: %s" % r.stderr)
m = json.load(open(os.path.join(dec, "manifest.json")))
shapes = {f["name"]: f.get("shape") for f in m["fields"]} if isinstance(m.get("fields"), list) else {}
t.check(shapes.get("image") in ([3, 32, 48], None), "image shape %s" % shapes.get("image"))
for i, s in read_all(dec, "dec").items():
    path, label = expected[i]
    img = np.asarray(s["image"])
    t.check(img.shape == (3, 32, 48), "sample %d shape %s" % (i, img.shape))
    W, H = Image.open(path).size
    ref = reference(path, 32, 48, "center", plan("center", W, H, 48, 32, 0, 0, 0, 0))
    ref = ref.transpose(2, 0, 1)
    d = np.abs(img.astype(np.int16) - ref)
    t.check(d.mean() <= 1.5 and np.percentile(d, 99) <= 20,
            "sample %d (%s): mean %.2f p99 %.0f against PIL" % (i, path, d.mean(),
                                                                np.percentile(d, 99)))
    t.check(s["label"] == label, "decoded sample %d label" % i)

# ---- bad arguments -----------------------------------------------------------------------
r = ingest(os.path.join(env.dir, "x"))
t.check(r.returncode == 2 and "--encoded" in r.stderr, "neither form: %r" % r.stderr)
r = subprocess.run([CLI, "ingest", "images", "--help"], capture_output=True, text=True)
t.check(r.returncode == 0 and "ImageFolder" in r.stdout, "--help")
env.close()
sys.exit(t.done())
