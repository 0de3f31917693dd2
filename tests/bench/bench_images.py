#!/usr/bin/python3
"""Image benchmarks (issues 18 and 19), each figure beside its reference measured in the same run
on the same JPEGs (written here by PIL: ImageNet-like sizes 333..1024 px, quality 90):

Rates are per CPU-second (user + system time of the process doing the work), so that a shared
machine's other load does not enter: "per core".
  decode   one thread of the codec (client/lib/image/image.c through tests/integration/image_tool):
           decode + RandomResizedCrop(224) + flip, images/s, against PIL decode +
           torchvision-equivalent RandomResizedCrop (same get_params, crop, resize BILINEAR) +
           flip in this process (torchvision's own loader: Image.open + convert("RGB")). Also
           shown: the codec with the accurate IDCT (DSCACHE_JPEG_DCT=accurate; the default is
           the fast one), and PIL with Image.draft (its DCT scaling: the smallest scale that
           keeps the crop at least 224 px, then resize of the scaled box), which torchvision
           does not do. Rounds alternate (codec, codec accurate, PIL, PIL draft, codec, ...) so
           that a shared machine's noise falls on all; the median of each is reported, and the
           median of the per-round ratios.
  ingest   `dscache ingest images --size 224` (read, decode, resize + center crop, lz4, write:
           every thread's CPU time) against PIL decode + Resize(224) + CenterCrop(224) in one
           process (no write).
  bytes    cached bytes per image: `ingest images --encoded` (the files as they are, and
           re-encoded with --max-side 256) against the decoded u8[3,224,224] lz4 dataset of the
           same images (shard file bytes / images).
Usage: tests/bench/bench_images.py [BUILD_DIR]   (BENCH_IMAGES=64, BENCH_SECONDS=3 per round)
Prints a table; well under a minute on 2 cores."""
import io
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image, ImageFilter

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
TOOL = os.path.join(BUILD, "bin", "image_tool")
CLI = os.path.join(BUILD, "bin", "dscache")
N = int(os.environ.get("BENCH_IMAGES", "64"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
ROUNDS = 3
for p in (TOOL, CLI):
    if not os.path.exists(p):
        sys.exit("bench_images: %s is not built (cmake --build %s)" % (p, BUILD))

work = tempfile.mkdtemp(prefix="bench_images.")
SIZES = [(500, 375), (500, 333), (375, 500), (640, 480), (800, 600), (1024, 768), (500, 400)]


def picture(w, h, rng):
    y, x = np.mgrid[0:h, 0:w]
    fx, fy = rng.uniform(5, 40, 2)
    a = np.stack([127 + 100 * np.sin(x / fx + y / fy), y * 255.0 / h,
                  127 + 100 * np.cos((x - y) / (fx + fy))], -1)
    a = a + rng.normal(0, 18, (h, w, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(1.0))


def make_folder():
    rng = np.random.default_rng(0)
    root = os.path.join(work, "folder")
    paths = []
    for i in range(N):
        cls = os.path.join(root, "class%d" % (i % 4))
        os.makedirs(cls, exist_ok=True)
        p = os.path.join(cls, "img%04d.jpg" % i)
        picture(*SIZES[i % len(SIZES)], rng).save(p, quality=90)
        paths.append(p)
    return root, paths


def rrc_params(W, H, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):  # torchvision get_params
    area = W * H
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * random.uniform(*scale)
        aspect = math.exp(random.uniform(lo, hi))
        w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < w <= W and 0 < h <= H:
            return random.randint(0, H - h), random.randint(0, W - w), h, w
    w, h = W, H
    if W / H < ratio[0]:
        h = int(round(w / ratio[0]))
    elif W / H > ratio[1]:
        w = int(round(h * ratio[1]))
    return (H - h) // 2, (W - w) // 2, h, w


def pil_decode_rrc(blobs, seconds):
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        for b in blobs:
            im = Image.open(io.BytesIO(b)).convert("RGB")
            i, j, h, w = rrc_params(*im.size)
            im = im.crop((j, i, j + w, i + h)).resize((224, 224), Image.BILINEAR)
            if random.random() < 0.5:
                im = im.transpose(Image.FLIP_LEFT_RIGHT)
            np.asarray(im)
            n += 1
    return n / (time.process_time() - c0)


def pil_decode_rrc_draft(blobs, seconds):
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        for b in blobs:
            im = Image.open(io.BytesIO(b))
            W, H = im.size
            i, j, h, w = rrc_params(W, H)
            im.draft("RGB", (math.ceil(W * 224 / w), math.ceil(H * 224 / h)))
            sx, sy = im.size[0] / W, im.size[1] / H
            im = im.convert("RGB").resize((224, 224), Image.BILINEAR,
                                          box=(j * sx, i * sy, (j + w) * sx, (i + h) * sy))
            if random.random() < 0.5:
                im = im.transpose(Image.FLIP_LEFT_RIGHT)
            np.asarray(im)
            n += 1
    return n / (time.process_time() - c0)


def codec_decode_rrc(paths, seconds, dct=None):
    env = dict(os.environ)
    env.pop("DSCACHE_JPEG_DCT", None)
    if dct:
        env["DSCACHE_JPEG_DCT"] = dct
    out = subprocess.run([TOOL, "bench", "random_resized", "224", "224", "1", str(seconds)] + paths,
                         check=True, capture_output=True, text=True, env=env).stdout.split()
    return int(out[1]) / float(out[5])


def pil_ingest(blobs):
    c0 = time.process_time()
    for b in blobs:
        im = Image.open(io.BytesIO(b)).convert("RGB")
        W, H = im.size
        s = 224 / min(W, H)
        im = im.resize((max(224, round(W * s)), max(224, round(H * s))), Image.BILINEAR)
        W, H = im.size
        top, left = int(round((H - 224) / 2.0)), int(round((W - 224) / 2.0))
        np.asarray(im.crop((left, top, left + 224, top + 224))).transpose(2, 0, 1).tobytes()
    return len(blobs) / (time.process_time() - c0)


def ingest(folder, out, args):
    """CPU seconds (user + system) of the ingest process, all its threads."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([CLI, "ingest", "images", folder, "-o", out] + args, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def stored_bytes(ds):
    return sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds) if f.endswith(".dsc"))


def median(v):
    return sorted(v)[len(v) // 2]


def main():
    folder, paths = make_folder()
    blobs = [open(p, "rb").read() for p in paths]
    cores = os.cpu_count()
    mean_kb = sum(map(len, blobs)) / len(blobs) / 1000
    print("bench_images: %d JPEGs (quality 90, %s, mean %.0f KB), %d cores"
          % (N, "/".join("%dx%d" % s for s in SIZES), mean_kb, cores))
    random.seed(0)
    rates = {"codec": [], "accurate": [], "pil": [], "draft": []}
    for _ in range(ROUNDS):
        rates["codec"].append(codec_decode_rrc(paths, SECONDS))
        rates["accurate"].append(codec_decode_rrc(paths, SECONDS, "accurate"))
        rates["pil"].append(pil_decode_rrc(blobs, SECONDS))
        rates["draft"].append(pil_decode_rrc_draft(blobs, SECONDS))

    def ratio(a, b):
        return median([x / y for x, y in zip(rates[a], rates[b])])
    print("%-44s %10s %10s %7s" % ("images per CPU-second", "dscache", "PIL", "ratio"))
    print("decode + RandomResizedCrop(224) + flip, per thread (median of %d rounds)" % ROUNDS)
    for label, a, b in (("  dscache vs PIL (torchvision's way)", "codec", "pil"),
                        ("  dscache accurate IDCT vs PIL", "accurate", "pil"),
                        ("  dscache vs PIL with draft()", "codec", "draft"),
                        ("  dscache accurate IDCT vs PIL draft()", "accurate", "draft")):
        print("%-44s %10.0f %10.0f %6.2fx" % (label, median(rates[a]), median(rates[b]),
                                              ratio(a, b)))
    have_images = subprocess.run([CLI, "ingest", "images", "--help"], capture_output=True).returncode == 0
    if not have_images:
        print("ingest images: not in this build (skipped)")
    else:
        ingest_rates, pil_ing = [], []
        for r in range(ROUNDS):
            t = ingest(folder, os.path.join(work, "dec%d" % r), ["--size", "224", "--force"])
            ingest_rates.append(N / t)
            pil_ing.append(pil_ingest(blobs))
        ratio = median([a / b for a, b in zip(ingest_rates, pil_ing)])
        print("%-44s %10.0f %10.0f %6.2fx" % ("ingest images --size 224, per CPU-second",
                                              median(ingest_rates), median(pil_ing), ratio))
        dec = stored_bytes(os.path.join(work, "dec0"))
        for label, args in (("files as they are", []),
                            ("--max-side 256 (JPEG q90)", ["--max-side", "256"])):
            ingest(folder, os.path.join(work, "enc"), ["--encoded", "--force"] + args)
            enc = stored_bytes(os.path.join(work, "enc"))
            print("%-44s %10.0f %10.0f %6.2fx" % ("bytes/image --encoded %s vs u8[3,224,224]" % label,
                                                  enc / N, dec / N, enc / dec))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(work, ignore_errors=True)
