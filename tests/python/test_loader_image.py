"""Decode stage in the loader (issue 19): an ImageFolder written here with PIL, `dscache ingest
images --encoded`, served by dscached, iterated with decode={"image": dscache.Image(64x64,
random_resized, flip)}: batch["image"] uint8 [B, 3, 64, 64] (and [B, 64, 64, 3] with hwc), pixels
within tolerance of PIL on the box docs/order.md gives, byte-identical across a resume and a
world-size change (2 ranks), different across epochs; a corrupt JPEG (stored with --no-verify)
fails next() with DecodeError (DSC_EDECODE) naming dataset, shard and sample, or with
on_decode_error="fill" is a zero image counted in stats() and the metrics."""
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
rng = np.random.default_rng(3)
SEED, B, S = 5, 8, 64


def picture(w, h):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255.0 / w, y * 255.0 / h, 128 + 60 * np.sin((x + y) / 9.0)], -1)
    return Image.fromarray(np.clip(a + rng.normal(0, 6, a.shape), 0, 255).astype(np.uint8))


def folder(root, n, corrupt=None):
    paths = []
    for i in range(n):
        cls = os.path.join(root, "c%d" % (i % 3))
        os.makedirs(cls, exist_ok=True)
        fmt, ext = [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")][i % 3]
        p = os.path.join(cls, "%03d.%s" % (i, ext))
        picture(80 + 13 * (i % 7), 60 + 11 * (i % 5)).save(p, fmt, quality=92)
        paths.append(p)
    if corrupt:
        p = os.path.join(root, "c0", corrupt)
        data = open(paths[0], "rb").read()
        open(p, "wb").write(data[:len(data) * 2 // 3])  # the header intact, the data cut
    return paths


def ingest(root, name, *args):
    out = os.path.join(env.dir, name)
    r = subprocess.run([CLI, "ingest", "images", root, "-o", out, "--name", name, "--encoded",
                        "--chunk-size", "16K", "--shard-size", "64K"] + list(args),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return out


root = os.path.join(env.dir, "imgs-src")
folder(root, 60)
ds = ingest(root, "imgs")
_, addr = env.start_server(ds)
files = sorted((os.path.join(r, n) for r, _, ns in os.walk(root) for n in ns),
               key=lambda p: (os.path.basename(os.path.dirname(p)), p))


def make(rank=0, world=1, **kw):
    args = dict(servers=addr, dataset="imgs", batch_size=B, seed=SEED, rank=rank,
                world_size=world, indices=True, drop_last=False, decode_threads=2,
                decode={"image": dscache.Image(size=(S, S), crop="random_resized", flip=True)})
    args.update(kw)
    return dscache.Loader(**args)


def collect(loader, epoch, limit=None, into=None):
    into = {} if into is None else into
    loader.set_epoch(epoch)
    for k, batch in enumerate(loader):
        if k == 0:
            t.check(batch["image"].shape[1:] == (3, S, S) and batch["image"].dtype == np.uint8,
                    "image batch %s %s" % (batch["image"].shape, batch["image"].dtype))
            t.check("image_offsets" not in batch, "a decoded field has no offsets")
        for i, img in zip(np.asarray(batch["__index__"]), batch["image"]):
            into[int(i)] = np.array(img)
        if limit is not None and k + 1 == limit:
            break
    return into


with make() as ld:
    t.check(ld.fields[0][2] == (3, S, S), "fields: %s" % (ld.fields,))
    e0 = collect(ld, 0)
    e1 = collect(ld, 1)
    st = ld.stats()
    t.check(st["image_seconds"] > 0 and st["decode_errors"] == 0, "stats: %s %s"
            % (st["image_seconds"], st["decode_errors"]))
t.check(sorted(e0) == list(range(60)), "epoch 0 holds every sample once")

# pixels against PIL on docs/order.md's box
worst = 0.0
for i, img in e0.items():
    path = files[i]
    W, H = Image.open(path).size
    box = plan("random_resized", W, H, S, S, SEED, 0, i, 1)
    ref = reference(path, S, S, "random_resized", box).transpose(2, 0, 1)
    d = np.abs(img.astype(np.int16) - ref)
    worst = max(worst, float(d.mean()))
    t.check(d.mean() <= 1.5 and np.percentile(d, 99) <= 20,
            "sample %d (%s): mean %.2f p99 %.0f against PIL" % (i, path, d.mean(),
                                                                np.percentile(d, 99)))
print("worst mean |diff| against PIL: %.2f" % worst)
differ = sum(not np.array_equal(e0[i], e1[i]) for i in e0)
t.check(differ >= 55, "epoch 1 differs from epoch 0 on %d of 60 samples" % differ)

# resume: 3 batches, state_dict, a new loader goes on; the union equals epoch 0 byte for byte
with make() as ld:
    part = collect(ld, 0, limit=3)
    state = ld.state_dict()
with make() as ld:
    ld.load_state_dict(state)
    collect(ld, 0, into=part)
t.check(sorted(part) == list(range(60)) and all(np.array_equal(part[i], e0[i]) for i in part),
        "resumed epoch 0 equals the uninterrupted one")
# another world size: two ranks together give the same images
both = {}
for r in (0, 1):
    with make(rank=r, world=2) as ld:
        collect(ld, 0, into=both)
t.check(sorted(both) == list(range(60)) and all(np.array_equal(both[i], e0[i]) for i in both),
        "world size 2 gives the same images as world size 1")
# hwc layout
with make(decode={"image": dscache.Image(size=(S, S), crop="random_resized", flip=True,
                                         layout="hwc")}) as ld:
    batch = next(iter(ld))
    i0 = int(batch["__index__"][0])
    t.check(batch["image"].shape[1:] == (S, S, 3) and
            np.array_equal(np.asarray(batch["image"][0]).transpose(2, 0, 1), e0[i0]),
            "hwc is the transpose of chw")

# torch output: a [B, 3, S, S] uint8 tensor through DLPack, the same pixels
try:
    import torch  # noqa: F401
    with make(output="torch") as ld:
        ld.set_epoch(0)
        batch = next(iter(ld))
        img = batch["image"]
        i0 = int(batch["__index__"][0])
        t.check(tuple(img.shape[1:]) == (3, S, S) and str(img.dtype) == "torch.uint8" and
                np.array_equal(img[0].numpy(), e0[i0]), "torch batch %s %s" % (img.shape,
                                                                             img.dtype))
except ImportError:
    print("torch missing: torch output not checked")

# a corrupt JPEG: DecodeError naming dataset, shard and sample; or a counted zero image
bad_root = os.path.join(env.dir, "bad-src")
folder(bad_root, 12, corrupt="000a.jpg")
bds = ingest(bad_root, "bad", "--no-verify")
_, baddr = env.start_server(bds)
with make(servers=baddr, dataset="bad", world_size=1) as ld:
    try:
        collect(ld, 0)
        t.check(False, "a corrupt JPEG raises")
    except dscache.DecodeError as e:
        msg = str(e)
        t.check(e.name == "DSC_EDECODE" and "dataset bad" in msg and "shard 0" in msg and
                "sample 1" in msg and "jpeg" in msg, "DecodeError message: %s" % msg)
with make(servers=baddr, dataset="bad", on_decode_error="fill") as ld:
    got = collect(ld, 0)
    st = ld.stats()
    t.check(st["decode_errors"] == 1, "decode_errors %d" % st["decode_errors"])
    t.check(not got[1].any() and got[0].any(), "the corrupt sample is a zero image")
    t.check("dscache_loader_decode_errors_total" in ld.metrics_text() or
            "decode_errors_total" in ld.metrics_text(), "metrics name decode errors")
try:
    make(decode={"image": dscache.Image(size=(0, 10))})
    t.check(False, "size 0 refused")
except dscache.InvalidOption:
    pass
# device="cuda" without nvJPEG: the library's WARN line reaches Python as a RuntimeWarning (the
# line itself needs a GPU: tests/gpu/run_gpu_checks.sh; here the bridge is fed the same text)
import warnings  # noqa: E402
from dscache import _logbridge  # noqa: E402
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    _logbridge._on_log(None, 1, b"loader: device=cuda: nvJPEG is not usable (no nvJPEG library): "
                       b"images are decoded on the host and copied to the device with the batch")
t.check(any(issubclass(w.category, RuntimeWarning) and "nvJPEG" in str(w.message)
            for w in caught), "the nvJPEG fallback is a RuntimeWarning: %r" % caught)
env.close()
sys.exit(t.done())
