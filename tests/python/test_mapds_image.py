"""Image decode through dscache.MapDataset (map-style, dsc_reader_*): the same decode= options as
the loader give byte-identical images for the same (seed, epoch, sample index), whatever the
order and batch the samples are asked in, from whole chunks or from sample ranges (RANGE, a
1-byte cache): random_resized crops with flips in CHW and HWC, center
crops, epochs 0 and 1 (set_epoch), one sample and batches; a DataLoader with 2 workers and a
DistributedSampler gives the same images; a corrupt JPEG raises DecodeError naming the sample,
or with on_decode_error="fill" is a zero image counted in stats()."""
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

env = te.Env()
t = te.Checks()
CLI = os.path.join(te.BIN, "dscache")
rng = np.random.default_rng(8)
SEED, S, N = 9, 48, 45


def folder(root, n, corrupt=None):
    for i in range(n):
        cls = os.path.join(root, "c%d" % (i % 3))
        os.makedirs(cls, exist_ok=True)
        fmt, ext = [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")][i % 3]
        w, h = 70 + 13 * (i % 7), 50 + 11 * (i % 5)
        a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(a).save(os.path.join(cls, "%03d.%s" % (i, ext)), fmt, quality=90)
    if corrupt:
        src = os.path.join(root, "c0", "000.jpg")
        data = open(src, "rb").read()
        open(os.path.join(root, "c0", corrupt), "wb").write(data[:len(data) * 2 // 3])


def ingest(root, name, *args):
    out = os.path.join(env.dir, name)
    r = subprocess.run([CLI, "ingest", "images", root, "-o", out, "--name", name, "--encoded",
                        "--chunk-size", "16K", "--shard-size", "64K"] + list(args),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return out


root = os.path.join(env.dir, "src")
folder(root, N)
_, addr = env.start_server(ingest(root, "imgs"))


def loader_images(image, epoch):
    out = {}
    with dscache.Loader(servers=addr, dataset="imgs", batch_size=8, seed=SEED, indices=True,
                        decode={"image": image}) as ld:
        ld.set_epoch(epoch)
        for batch in ld:
            for i, img in zip(np.asarray(batch["__index__"]), batch["image"]):
                out[int(i)] = np.array(img)
    return out


for image in (dscache.Image(size=(S, S), crop="random_resized", flip=True),
              dscache.Image(size=(S, S + 8), crop="random_resized", flip=True, layout="hwc"),
              dscache.Image(size=(S, S), crop="center")):
    # cache_bytes=1: the reader asks for sample ranges (RANGE): the encoded bytes of just the
    # images a request needs, cut out of their chunks by the server
    for cache in (None, 1):
        ds = dscache.MapDataset(servers=addr, dataset="imgs", seed=SEED, decode={"image": image},
                                cache_bytes=cache)
        for epoch in (0, 1):
            want = loader_images(image, epoch)
            ds.set_epoch(epoch)
            order = rng.permutation(N).tolist()
            got = {}
            for k in range(0, N, 7):  # batches of 7 in a random order
                idx = order[k:k + 7]
                b = ds[idx]
                for i, img in zip(idx, b["image"]):
                    got[i] = np.array(img)
            single = {i: np.array(ds[i]["image"]) for i in order[:10]}
            t.check(sorted(got) == list(range(N)), "every sample read")
            same = sum(np.array_equal(got[i], want[i]) for i in range(N))
            t.check(same == N, "%r cache %s epoch %d: %d of %d batch images equal the loader's"
                    % (image, cache, epoch, same, N))
            t.check(all(np.array_equal(single[i], want[i]) for i in single),
                    "%r epoch %d: ds[i] equals the loader's image" % (image, epoch))
    if image.crop == "random_resized" and image.layout == "chw":
        e1 = want
        differ = sum(not np.array_equal(got[i], loader_images(image, 0)[i]) for i in range(N))
        t.check(differ >= N - 3, "epoch 1 crops differ from epoch 0's on %d of %d" % (differ, N))
        # a DataLoader with workers: the epoch set before its iterator starts
        try:
            import torch  # noqa: F401
            import dscache.torch
            from torch.utils.data import DataLoader, DistributedSampler
        except ImportError:
            print("SKIP (part): torch is missing: the DataLoader run is left out")
            continue
        tds = dscache.torch.MapDataset(servers=addr, dataset="imgs", seed=SEED, indices=True,
                                       decode={"image": image})
        tds.set_epoch(1)
        n = 0
        for rank in (0, 1):
            sampler = DistributedSampler(tds, num_replicas=2, rank=rank, shuffle=True)
            for batch in DataLoader(tds, batch_size=5, sampler=sampler, num_workers=2):
                for i, img in zip(batch["__index__"].tolist(), batch["image"].numpy()):
                    t.check(np.array_equal(img, e1[i]), "DataLoader workers=2: sample %d" % i)
                    n += 1
        t.check(n >= N, "DataLoader over 2 ranks read %d samples" % n)

# a corrupt JPEG: DecodeError naming the sample, or a counted zero image
bad_root = os.path.join(env.dir, "bad-src")
folder(bad_root, 6, corrupt="zz-cut.jpg")
_, baddr = env.start_server(ingest(bad_root, "bad", "--no-verify"))
im = dscache.Image(size=(S, S))
bad = dscache.MapDataset(servers=baddr, dataset="bad", decode={"image": im})
cut = None
for i in range(len(bad)):
    try:
        bad[i]
    except dscache.DecodeError as e:
        cut = i
        t.check("sample %d" % i in str(e) and "bad" in str(e), "DecodeError names it: %s" % e)
t.check(cut is not None, "the cut JPEG raised DecodeError")
t.check(bad[[0, 1]]["image"].shape == (2, 3, S, S), "the reader stays usable after DecodeError")
fill = dscache.MapDataset(servers=baddr, dataset="bad", decode={"image": im},
                          on_decode_error="fill")
t.check(not fill[cut]["image"].any() and fill.stats()["decode_errors"] == 1,
        "on_decode_error=fill: a zero image, counted")
sys.exit(t.done())
