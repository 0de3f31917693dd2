#!/usr/bin/python3
"""End-to-end image loading (issue 19) on this machine, one run, the same JPEGs (written here by
PIL into an ImageFolder, 500x375..640x480, quality 90):

  dscache    `dscache ingest images --encoded`, dscached on 127.0.0.1, dscache.Loader with
             decode={"image": Image(224x224, random_resized, flip)}, decode_threads = the cores
  PIL + DL   a torch Dataset reading the files with PIL: decode, torchvision's RandomResizedCrop
             (get_params as torchvision 0.14 draws them, crop, resize BILINEAR), horizontal flip
             with p = 1/2, to a uint8 [3, 224, 224] tensor; torch DataLoader with 0 and 2 workers
             (torchvision itself is not installed here: its transforms are written out)

each load-only, with a 5 ms step, and with a "fit" step whose demand is 60% of dscache's
load-only rate (time.sleep: a GPU step leaves the host's cores free): samples/s, and the stall
(share of the wall time spent waiting for the next batch).
Then the stall claim ("< 2% at a 5 ms step wherever the decode threads' rate exceeds the step's
demand"): for batch sizes 8, 4, 2, 1, the decode threads' own rate (load only, assist=False: the
consumer does not decode) and, at the first batch size whose 5 ms step asks at most 70% of that
rate, the stall at the 5 ms step (assist on, the default). The stall is what the training loop
sees: the share of the wall time spent in next() as Python sees it (the loader's wait, the
binding's work and, on busy cores, the consumer waiting for a core); beside it the loader's own
wait (stats()["stall_seconds"] over the run: next() waiting for a batch not ready). The 5 ms
step runs twice, in the same run, through the package's two next() paths: the compiled next()
(dscache._fast) and the Python one over dsc_loader_next_views (as with DSCACHE_FASTPATH=0).
Each row gives the CPU seconds of this process per image and the load average (1 min) when it
ran: on shared cores another job's load takes the decode threads' CPU while the consumer sleeps.
Usage: tests/bench/bench_loader_images.py [BUILD_DIR]   (BENCH_IMAGES=192, BENCH_SECONDS=3,
       BENCH_STALL_ONLY=1: the stall claim alone)"""
import io  # noqa: F401
import math
import os
import random
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
os.environ.setdefault("DSC_BIN", os.path.join(BUILD, "bin"))
os.environ.setdefault("DSCACHE_LIB", os.path.join(BUILD, "lib", "libdscache.so"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import subprocess  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image, ImageFilter  # noqa: E402

import dsc_testenv as te  # noqa: E402
import dscache  # noqa: E402

N = int(os.environ.get("BENCH_IMAGES", "192"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
BATCH = 32
STEP = 0.005
CORES = os.cpu_count()
env = te.Env()


def picture(w, h, rng):
    y, x = np.mgrid[0:h, 0:w]
    fx, fy = rng.uniform(5, 40, 2)
    a = np.stack([127 + 100 * np.sin(x / fx + y / fy), y * 255.0 / h,
                  127 + 100 * np.cos((x - y) / (fx + fy))], -1)
    a = a + rng.normal(0, 18, (h, w, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(1.0))


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


class Folder(torch.utils.data.Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        im = Image.open(self.paths[i]).convert("RGB")
        top, left, h, w = rrc_params(*im.size)
        im = im.crop((left, top, left + w, top + h)).resize((224, 224), Image.BILINEAR)
        if random.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1), i % 4


def run(batches, step, per_call=False):
    """Iterates batches for SECONDS: (samples/s, stall fraction[, seconds per next()])."""
    n, wait, calls, t0 = 0, 0.0, 0, time.perf_counter()
    it = batches()
    while True:
        a = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            it = batches()
            continue
        wait += time.perf_counter() - a
        calls += 1
        n += len(b[0]) if isinstance(b, (list, tuple)) else len(b["image"])
        if step:
            time.sleep(step)
        if time.perf_counter() - t0 >= SECONDS:
            break
    total = time.perf_counter() - t0
    return (n / total, wait / total) + ((wait / max(1, calls),) if per_call else ())


def stall_claim(addr):
    print("5 ms step where the decode threads keep up (%d decode threads); stall = the share of "
          "the wall time spent in next() as Python sees it (what the training loop loses), "
          "beside it the loader's own wait (stats()[\"stall_seconds\"]):" % CORES)
    for batch in [int(b) for b in os.environ.get("BENCH_STALL_BATCHES", "8,4,2,1").split(",")]:
        rates, rows = {}, []
        # assist off: the decode threads' own rate; then the 5 ms step (assist on, the default)
        # through the compiled next() and through the Python one (no compiled next()), in the
        # same run.
        for assist, path in ((False, "now"), (True, "now"), (True, "ctypes")):
            ld = dscache.Loader(servers=addr, dataset="imgs", batch_size=batch, seed=0, rank=0,
                                world_size=1, decode_threads=CORES, prefetch=8, assist=assist,
                                decode={"image": dscache.Image(size=(224, 224),
                                                               crop="random_resized", flip=True)})
            if path != "now":
                ld._fast = None  # the Python path (as with DSCACHE_FASTPATH=0)
            epoch = [0]

            def batches(ld=ld, epoch=epoch):
                ld.set_epoch(epoch[0])
                epoch[0] += 1
                return iter(ld)
            c0 = time.process_time()
            if not assist:
                rates["threads"] = run(batches, 0)[0]
                rates["cpu"] = (time.process_time() - c0) / (rates["threads"] * SECONDS)
                rates["load"] = os.getloadavg()[0]
            else:
                s0 = ld.stats()
                r, stall, per_call = run(batches, STEP, per_call=True)
                s1 = ld.stats()
                cpu = (time.process_time() - c0) / (r * SECONDS)
                # the loader's own stall: next() waiting for a batch not yet ready
                lstall = ((s1["stall_seconds"] - s0["stall_seconds"]) /
                          max(1e-9, s1["wall_seconds"] - s0["wall_seconds"]))
                rows.append((r, stall, per_call, lstall, cpu, os.getloadavg()[0]))
            ld.close()
            demand = batch / STEP
            if not assist and demand > 0.7 * rates["threads"]:
                print("  batch %d: decode threads %.0f samples/s (%.2f ms CPU/image, load %.1f): "
                      "a 5 ms step asks %.0f (%.0f%%), more than 70%%"
                      % (batch, rates["threads"], 1000 * rates["cpu"], rates["load"], demand,
                         100 * demand / rates["threads"]))
                break
        else:
            print("  batch %d: decode threads %.0f samples/s (%.2f ms CPU/image, load %.1f); "
                  "5 ms step asks %.0f (%.0f%%):"
                  % (batch, rates["threads"], 1000 * rates["cpu"], rates["load"], demand,
                     100 * demand / rates["threads"]))
            for what, (r, stall, per_call, lstall, cpu, load) in zip(
                    ("next() now" + (" (compiled)" if dscache.fastpath else " (no compiled "
                                                        "next(): %s)" % dscache.fastpath_reason),
                     "next() in Python (DSCACHE_FASTPATH=0)"), rows):
                print("    %-58s %6.0f samples/s, stall %.2f%% (%.3f ms per next()), loader's "
                      "wait %.2f%% (stats()), %.2f ms CPU/image, load %.1f"
                      % (what, r, 100 * stall, 1000 * per_call, 100 * lstall, 1000 * cpu, load))
            return


def main():
    rng = np.random.default_rng(0)
    root = os.path.join(env.dir, "folder")
    paths = []
    sizes = [(500, 375), (500, 333), (375, 500), (640, 480)]
    for i in range(N):
        d = os.path.join(root, "c%d" % (i % 4))
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "%04d.jpg" % i)
        picture(*sizes[i % len(sizes)], rng).save(p, quality=90)
        paths.append(p)
    ds = os.path.join(env.dir, "imgs")
    subprocess.run([os.path.join(BUILD, "bin", "dscache"), "ingest", "images", root, "-o", ds,
                    "--encoded"], check=True, stdout=subprocess.DEVNULL)
    _, addr = env.start_server(ds)
    if os.environ.get("BENCH_STALL_ONLY"):  # only the stall claim (about 20 s)
        stall_claim(addr)
        env.close()
        return
    print("bench_loader_images: %d JPEGs (%s), batch %d, RandomResizedCrop(224) + flip, "
          "%d cores, %.0f s per row" % (N, "/".join("%dx%d" % s for s in sizes), BATCH, CORES,
                                        SECONDS))
    print("%-38s %9s %7s %9s %7s %9s %7s" % ("samples/s, stall", "load", "", "5 ms", "",
                                           "fit", ""))
    loader = dscache.Loader(servers=addr, dataset="imgs", batch_size=BATCH, seed=0, rank=0,
                            world_size=1, decode_threads=CORES, prefetch=4,
                            decode={"image": dscache.Image(size=(224, 224), crop="random_resized",
                                                           flip=True)})
    epoch = [0]

    def dsc_batches():
        loader.set_epoch(epoch[0])
        epoch[0] += 1
        return iter(loader)

    rows = [("dscache decode (%d decode threads)" % CORES, dsc_batches)]
    for workers in (0, 2):
        dl = torch.utils.data.DataLoader(Folder(paths), batch_size=BATCH, shuffle=True,
                                         num_workers=workers, persistent_workers=workers > 0,
                                         prefetch_factor=4 if workers else 2)
        rows.append(("PIL + DataLoader, %d workers" % workers, lambda dl=dl: iter(dl)))
    results = {}
    fit = None
    for name, batches in rows:
        load = run(batches, 0)
        if fit is None:  # a step whose demand is 60% of dscache's load-only rate
            fit = BATCH / (0.6 * load[0])
        results[name] = (load, run(batches, STEP), run(batches, fit))
        (r0, s0), (r5, s5), (rf, sf) = results[name]
        print("%-38s %9.0f %6.1f%% %9.0f %6.1f%% %9.0f %6.1f%%"
              % (name, r0, 100 * s0, r5, 100 * s5, rf, 100 * sf))
    print("fit: a %.0f ms step (demand %.0f samples/s, 60%% of dscache's load-only rate)"
          % (1000 * fit, BATCH / fit))
    loader.close()
    stall_claim(addr)
    base = results[rows[0][0]]
    for name, _ in rows[1:]:
        print("dscache / %s: %.2fx load only, %.2fx at a 5 ms step"
              % (name, base[0][0] / results[name][0][0], base[1][0] / results[name][1][0]))
    env.close()


if __name__ == "__main__":
    main()
