"""Pixels as torchvision makes them, on real images nobody here wrote: openclipart PNGs (Debian's
openclipart-png: line art, text, alpha, palettes, gray) and JPEG photos (Debian's mate-backgrounds
and matplotlib's sample photo). The codec (tests/integration/image_tool) against torchvision's
default loader and transforms, with PIL images (BILINEAR, antialiased):
  crop="center"          Resize(S) + CenterCrop(S) of Image.open(f).convert("RGB")
  crop="random_resized"  F.resized_crop(img, top, left, h, w, S): RandomResizedCrop given the
                         codec's box (the random parameters are dscache's own, docs/order.md)
  background=(r, g, b)   the image's alpha composited over that colour (PIL's paste with mask)
Tolerance per image: mean |difference| <= 1.5 and 99th percentile <= 12 (of 255). Where
torchvision is not installed the reference is tests/python/image_ref.py's PIL transcription of
the same transforms (checked here against torchvision where both are present). A missing data
package skips its part with the reason printed (deploy/local/setup.sh installs them)."""
import glob
import hashlib
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
try:
    import numpy as np
    from PIL import Image
except ImportError:
    te.skip("numpy or PIL is missing")
TOOL = os.path.join(te.BIN, "image_tool")
if not os.path.exists(TOOL):
    te.skip("image_tool is not built")

from image_ref import center_resize, load_rgb  # noqa: E402

try:
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
except ImportError:
    T = F = None
    print("torchvision is not installed (Debian: python3-torchvision): the reference is "
          "image_ref.py's PIL transcription of Resize + CenterCrop and resized_crop")

S = 224
OPENCLIPART = "/usr/share/openclipart/png"
SAMPLE = 150
PHOTOS = sorted(glob.glob("/usr/share/backgrounds/mate/nature/*.jpg")) + sorted(
    glob.glob("/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg"))
MEAN_MAX, P99_MAX = 1.5, 12

t = te.Checks()
work = tempfile.mkdtemp(prefix="dsc-tv-")
out_path = os.path.join(work, "out.raw")


def codec(path, crop, index=0, background=None, h=S, w=S):
    args = [TOOL, "decode", path, out_path, str(h), str(w), crop, "0", "hwc", "7", "0", str(index)]
    if background is not None:
        args.append("%d,%d,%d" % tuple(background))
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    vals = r.stdout.split()
    return np.fromfile(out_path, np.uint8).reshape(h, w, 3), tuple(float(v) for v in vals[:4])


def center_ref(im, h=S, w=S):
    if T is not None and h == w:
        return np.asarray(T.CenterCrop(h)(T.Resize(h)(im)))
    new_w, new_h = center_resize(im.size[0], im.size[1], w, h)
    r = im if (new_w, new_h) == im.size else im.resize((new_w, new_h), Image.BILINEAR)
    left, top = int(round((new_w - w) / 2.0)), int(round((new_h - h) / 2.0))
    return np.asarray(r.crop((left, top, left + w, top + h)))


def resized_crop_ref(im, box):
    x, y, bw, bh = (int(v) for v in box)
    if F is not None:
        return np.asarray(F.resized_crop(im, y, x, bh, bw, [S, S]))
    return np.asarray(im.crop((x, y, x + bw, y + bh)).resize((S, S), Image.BILINEAR))


def diff(a, b):
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return float(d.mean()), float(np.percentile(d, 99))


worst = {}


def compare(kind, path, got, ref):
    if got is None:
        t.check(False, "%s %s: the codec failed" % (kind, path))
        return
    mean, p99 = diff(got, ref)
    if (mean, p99) > worst.get(kind, (0.0, 0.0, ""))[:2]:
        worst[kind] = (mean, p99, os.path.relpath(path, "/usr/share"))
    t.check(mean <= MEAN_MAX and p99 <= P99_MAX,
            "%s %s: mean %.2f p99 %.0f, over mean %.1f / p99 %d" % (kind, path, mean, p99,
                                                                    MEAN_MAX, P99_MAX))


def run_one(path, kind, alpha_too):
    im = load_rgb(path)
    got, box = codec(path, "center")
    if got is None:
        t.check(False, "%s: the codec failed: %s" % (path, box))
        return
    compare(kind + " center", path, got, center_ref(im))
    got, box = codec(path, "random_resized", index=1)
    compare(kind + " random_resized", path, got, resized_crop_ref(im, box))
    if alpha_too:
        bg = (255, 255, 255)
        got, _ = codec(path, "center", background=bg)
        compare(kind + " center, background white", path, got, center_ref(load_rgb(path, bg)))


# ---- openclipart PNGs: a fixed sample (by a hash of the path, so any install picks the same) --
if not os.path.isdir(OPENCLIPART):
    print("SKIP part: %s is absent (Debian package openclipart-png)" % OPENCLIPART)
else:
    pngs = sorted(glob.glob(os.path.join(OPENCLIPART, "**", "*.png"), recursive=True),
                  key=lambda p: hashlib.sha1(os.path.relpath(p, OPENCLIPART).encode()).hexdigest())
    modes = {}
    alpha_runs = 0
    for path in pngs[:SAMPLE]:
        with Image.open(path) as im0:
            mode = im0.mode
            has_alpha = mode in ("RGBA", "LA", "PA") or "transparency" in im0.info
        modes[mode] = modes.get(mode, 0) + 1
        run_one(path, "png", has_alpha and alpha_runs < 40)
        alpha_runs += has_alpha
    print("openclipart: %d PNGs, modes %s, %d with alpha or tRNS"
          % (min(SAMPLE, len(pngs)), dict(sorted(modes.items())), alpha_runs))
    t.check(alpha_runs >= 10, "the sample holds only %d images with alpha" % alpha_runs)

# ---- JPEG photos ------------------------------------------------------------------------
if not PHOTOS:
    print("SKIP part: no JPEG photos (Debian packages mate-backgrounds, python3-matplotlib)")
for path in PHOTOS:
    run_one(path, "jpeg", False)
    # another size (128: the JPEG's DCT scale then leaves about twice the output, where the
    # IDCT's shrink was farthest from PIL's), and a non-square output: Resize(s) with s the
    # smallest that covers it, then CenterCrop
    for h, w in ((128, 128), (96, 160)):
        got, _ = codec(path, "center", h=h, w=w)
        compare("jpeg center %dx%d" % (h, w), path, got, center_ref(load_rgb(path), h, w))

# ---- the PIL transcription equals torchvision where both are here ------------------------
if T is not None and PHOTOS:
    im = load_rgb(PHOTOS[0])
    a = np.asarray(T.CenterCrop(S)(T.Resize(S)(im)))
    new_w, new_h = center_resize(im.size[0], im.size[1], S, S)
    left, top = int(round((new_w - S) / 2.0)), int(round((new_h - S) / 2.0))
    b = np.asarray(im.resize((new_w, new_h), Image.BILINEAR).crop((left, top, left + S, top + S)))
    t.check(np.array_equal(a, b), "image_ref's Resize + CenterCrop differs from torchvision's")

for kind, (mean, p99, path) in sorted(worst.items()):
    print("%-32s worst mean |diff| %.2f, p99 %2.0f  (%s)" % (kind, mean, p99, path))

import shutil  # noqa: E402
shutil.rmtree(work, ignore_errors=True)
sys.exit(t.done())
