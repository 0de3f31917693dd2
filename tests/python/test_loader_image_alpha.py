"""Alpha through the loader (issue 33): translucent PNG and WebP images (RGBA, gray + alpha,
palette + tRNS), `dscache ingest images --encoded`, decoded by Loader(decode={"image":
dscache.Image(...)}): by default alpha is dropped as torchvision's loader (PIL's convert("RGB"))
drops it, for PNG and WebP alike; Image(background=(r, g, b)) composites over that colour
(dsc_field_options_t.image_background). Pixels within mean 1.5 / p99 12 of the PIL reference
(image_ref.py: Resize + CenterCrop), and the two outputs differ where alpha is below 255. A bad
background is refused in Python before anything starts."""
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
S, BG = 48, (40, 200, 250)


def translucent(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([x * 255.0 / w, y * 255.0 / h, 128 + 80 * np.sin((x - y) / 7.0)], -1)
    rgb = np.clip(rgb + rng.normal(0, 5, rgb.shape), 0, 255).astype(np.uint8)
    a = ((x + y) * 255 // (w + h - 2)).astype(np.uint8)  # transparent top-left .. opaque
    return Image.fromarray(np.dstack([rgb, a]), "RGBA")


root = os.path.join(env.dir, "alpha-src")
os.makedirs(os.path.join(root, "a"))
files = []
for i in range(6):
    im = translucent(70 + 9 * i, 50 + 7 * i, i)
    p = os.path.join(root, "a", "%02d.%s" % (i, ["png", "webp", "png"][i % 3]))
    if i % 3 == 0:
        im.save(p)
    elif i % 3 == 1:
        im.save(p, "WEBP", lossless=True)
    elif i == 2:
        im.convert("LA").save(p)
    else:
        pal = im.convert("RGB").quantize(32)
        common = int(np.bincount(np.asarray(pal).ravel()).argmax())
        pal.save(p, transparency=common)
    files.append(p)
out = os.path.join(env.dir, "alpha")
r = subprocess.run([CLI, "ingest", "images", root, "-o", out, "--name", "alpha", "--encoded"],
                   capture_output=True, text=True)
if r.returncode != 0:
    print(r.stderr)
    sys.exit(1)
_, addr = env.start_server(out)


def decoded(background):
    got = {}
    with dscache.Loader(servers=addr, dataset="alpha", batch_size=3, indices=True,
                        drop_last=False, shuffle=False,
                        decode={"image": dscache.Image(size=S, background=background,
                                                       layout="hwc")}) as ld:
        for batch in ld:
            for i, img in zip(np.asarray(batch["__index__"]), batch["image"]):
                got[int(i)] = np.array(img)
    return got


plain, over = decoded(None), decoded(BG)
t.check(sorted(plain) == list(range(6)) and sorted(over) == list(range(6)),
        "samples %s %s" % (sorted(plain), sorted(over)))
for i, path in enumerate(files):
    W, H = Image.open(path).size
    box = plan("center", W, H, S, S, 0, 0, i, 0)
    for got, bg in ((plain, None), (over, BG)):
        ref = reference(path, S, S, "center", box, background=bg)
        d = np.abs(got[i].astype(np.int16) - ref)
        t.check(d.mean() <= 1.5 and np.percentile(d, 99) <= 12,
                "%s background %s: mean %.2f p99 %.0f against PIL" % (path, bg, d.mean(),
                                                                      np.percentile(d, 99)))
    changed = np.count_nonzero(np.abs(plain[i].astype(np.int16) - over[i]) > 20)
    t.check(changed > 20, "%s: background changed %d values" % (path, changed))

for bad in ((1, 2), (0, 0, 256), "white"):
    try:
        dscache.Image(background=bad)
        t.check(False, "background %r accepted" % (bad,))
    except ValueError as e:
        t.check("background" in str(e), "background %r: %s" % (bad, e))
print("Image(background=BG): %r" % dscache.Image(background=BG))
env.close()
sys.exit(t.done())
