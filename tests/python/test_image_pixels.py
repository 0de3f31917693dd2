"""Image codec against PIL (issues 19 and 33): the codec (through tests/integration/image_tool)
decodes JPEG, PNG and WebP files written here by PIL, and its pixels are compared with what
torchvision makes of the same file with PIL (tests/python/image_ref.py: convert("RGB"), then
BILINEAR: RandomResizedCrop's crop then resize; center: Resize(s) + CenterCrop; none: a resize).
Tolerance, per image: mean absolute difference <= 1.5 (of 255), 99th percentile <= 12. JPEG is
decoded at a DCT scale (1/2, 1/4, 1/8) only where that leaves three times the output, and with
libjpeg's fast integer IDCT by default (measured here: mean <= 1.0, p99 <= 3, against PIL's
accurate one); DSCACHE_JPEG_DCT=accurate selects the accurate IDCT, and then a full-scale crop is
within mean 0.3. Alpha (RGBA and gray + alpha PNG, palette PNG with tRNS, lossy WebP with alpha)
is dropped as convert("RGB") drops it, or composited over a background colour. The crop boxes are
recomputed here from docs/order.md's keyed hash and must equal the codec's exactly. Real images:
test_image_torchvision.py."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
try:
    import numpy as np
    from PIL import Image, ImageFilter
except ImportError:
    te.skip("numpy or PIL is missing")

TOOL = os.path.join(te.BIN, "image_tool")
if not os.path.exists(TOOL):
    te.skip("image_tool is not built")
t = te.Checks()
work = tempfile.mkdtemp(prefix="dsc-img-")


from image_ref import plan, reference  # noqa: E402


def codec(path, h, w, crop, flip, layout, seed, epoch, index, env=None, background=None):
    out = os.path.join(work, "out.raw")
    args = [TOOL, "decode", path, out, str(h), str(w), crop, str(flip), layout, str(seed),
            str(epoch), str(index)]
    if background is not None:
        args.append("%d,%d,%d" % tuple(background))
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return None, r.stderr
    vals = r.stdout.split()
    box = tuple(float(v) for v in vals[:4]) + (int(vals[4]),)
    a = np.fromfile(out, np.uint8)
    a = a.reshape(3, h, w).transpose(1, 2, 0) if layout == "chw" else a.reshape(h, w, 3)
    return a, box


# ---- images written by PIL ---------------------------------------------------------------
def picture(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255.0 / w, y * 255.0 / h, ((x // 3 + y // 2) % 97) * 2.6], -1)
    a = a + rng.normal(0, 12, (h, w, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(1.5))


files = []
small, big = picture(500, 375, 1), picture(1280, 960, 2)
for name, im, kw in [("small.jpg", small, {"quality": 90}), ("big.jpg", big, {"quality": 90}),
                     ("prog.jpg", small, {"quality": 85, "progressive": True}),
                     ("gray.jpg", small.convert("L"), {}), ("small.png", small, {}),
                     ("palette.png", small.convert("P"), {}), ("small.webp", small, {"quality": 90}),
                     ("tall.png", picture(200, 900, 3), {})]:
    p = os.path.join(work, name)
    im.save(p, **kw)
    files.append(p)

def translucent(w, h, seed):
    """An RGBA picture whose alpha runs from transparent to opaque, with a hard-edged opaque
    shape (clip art's kind)."""
    rgb = np.asarray(picture(w, h, seed))
    y, x = np.mgrid[0:h, 0:w]
    a = (x * 255 // (w - 1)).astype(np.uint8)
    a[(x - w // 2) ** 2 + (y - h // 2) ** 2 < (h // 4) ** 2] = 255
    return Image.fromarray(np.dstack([rgb, a]), "RGBA")


alpha_files = []
rgba = translucent(400, 300, 4)
pal = rgba.convert("RGB").quantize(64)
common = int(np.bincount(np.asarray(pal).ravel()).argmax())  # made transparent (tRNS)
for name, im, kw in [("alpha.png", rgba, {}), ("la.png", rgba.convert("LA"), {}),
                     ("trns.png", pal, {"transparency": common}),
                     ("alpha.webp", rgba, {"quality": 90})]:
    p = os.path.join(work, name)
    im.save(p, **kw)
    files.append(p)
    alpha_files.append(p)

def diff_stats(a, b):
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return float(d.mean()), float(np.percentile(d, 99))


worst = {}
for path in files:
    W, H = Image.open(path).size
    for crop in ("center", "none", "random_resized"):
        for h, w in ((224, 224), (96, 160)):
            for index in range(3):
                layout = "hwc" if index == 2 else "chw"
                got, box = codec(path, h, w, crop, 1, layout, 11, 2, index)
                if got is None:
                    t.check(False, "%s: codec failed: %s" % (path, box))
                    continue
                want_box = plan(crop, W, H, w, h, 11, 2, index, 1)
                t.check(all(abs(a - b) < 1e-4 for a, b in zip(box, want_box)),
                        "%s %s: box %s, docs/order.md gives %s" % (path, crop, box, want_box))
                ref = reference(path, h, w, crop, box)
                d = np.abs(got.astype(np.int16) - ref.astype(np.int16))
                mean, p99 = float(d.mean()), float(np.percentile(d, 99))
                key = (os.path.basename(path), crop)
                worst[key] = max(worst.get(key, (0, 0)), (mean, p99))
                t.check(mean <= 1.5 and p99 <= 12,
                        "%s %s %dx%d #%d: mean %.2f p99 %.0f over the tolerance"
                        % (path, crop, h, w, index, mean, p99))
# alpha composited over a background colour instead of dropped
for path in alpha_files:
    W, H = Image.open(path).size
    for crop in ("center", "random_resized", "none"):
        bg = (255, 160, 20)
        got, box = codec(path, 224, 224, crop, 0, "hwc", 11, 2, 0, background=bg)
        if got is None:
            t.check(False, "%s: codec failed: %s" % (path, box))
            continue
        ref = reference(path, 224, 224, crop, box, background=bg)
        mean, p99 = diff_stats(got, ref)
        print("%-12s %-15s background: mean |diff| %.2f, p99 %.0f" % (os.path.basename(path),
                                                                     crop, mean, p99))
        t.check(mean <= 1.5 and p99 <= 12, "%s %s background %s: mean %.2f p99 %.0f"
                % (path, crop, bg, mean, p99))
        if crop == "none":  # the whole image: unlike the alpha-dropped pixels
            plain = reference(path, 224, 224, crop, box)
            changed = np.count_nonzero(np.abs(got.astype(np.int16) - plain) > 30)
            t.check(changed > 100, "%s: the background changed %d values" % (path, changed))

# the accurate IDCT (DSCACHE_JPEG_DCT=accurate): a full-scale JPEG crop close to PIL's decode
acc_env = dict(os.environ, DSCACHE_JPEG_DCT="accurate")
for index in range(3):
    W, H = Image.open(files[0]).size
    got, box = codec(files[0], 224, 224, "random_resized", 1, "chw", 11, 2, index, acc_env)
    ref = reference(files[0], 224, 224, "random_resized", box)
    mean = float(np.abs(got.astype(np.int16) - ref.astype(np.int16)).mean())
    t.check(mean <= 0.3, "accurate IDCT #%d: mean %.2f over 0.3" % (index, mean))
    print("small.jpg    accurate IDCT   #%d mean |diff| %.2f" % (index, mean))
for key, (mean, p99) in sorted(worst.items()):
    print("%-12s %-15s worst mean |diff| %.2f, p99 %.0f" % (key + (mean, p99)))

# different epochs give different crops; the same key the same bytes
a, _ = codec(files[0], 64, 64, "random_resized", 1, "chw", 1, 0, 5)
b, _ = codec(files[0], 64, 64, "random_resized", 1, "chw", 1, 0, 5)
c, _ = codec(files[0], 64, 64, "random_resized", 1, "chw", 1, 1, 5)
t.check(np.array_equal(a, b), "same (seed, epoch, index): same bytes")
t.check(not np.array_equal(a, c), "another epoch: another crop")

# a corrupt JPEG: an error naming the decoder's reason
bad = os.path.join(work, "bad.jpg")
open(bad, "wb").write(open(files[0], "rb").read()[:3000])
got, err = codec(bad, 32, 32, "center", 0, "chw", 0, 0, 0)
t.check(got is None and "jpeg" in err and "Premature end" in err, "truncated JPEG: %r" % err)

import shutil  # noqa: E402
shutil.rmtree(work, ignore_errors=True)
sys.exit(t.done())
