"""dscache.MapDataset and dscache.torch.MapDataset (map-style access, dsc_reader_*) over a real
dscached: len, ds[i], ds[list] / ds[a:b] / __getitems__ byte-equal to the source arrays;
torch.utils.data.DataLoader(ds, batch_size=B, sampler=DistributedSampler(...)) on 2 ranks with 0
and 2 workers delivering exactly the sampler's indices; the batch-sampler path; getitems=False;
variable-length fields; the chunk cache (no GET for samples read before); a request larger than
batch_size; bad input (index out of range naming index and length, negative indices with Python
semantics, non-integers, the loader's ordering options refused, an unknown dataset)."""
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
try:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler
except ImportError:
    te.skip("torch is not installed")
import numpy as np  # noqa: E402
import dscache  # noqa: E402
import dscache.torch  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(5)
N = 1500
arrays = {"x": rng.standard_normal((N, 24)).astype(np.float32),
          "img": rng.integers(0, 256, (N, 3, 4, 4), dtype=np.uint8),
          "label": rng.integers(0, 1000, N).astype(np.int64)}
ds_dir = env.ingest_npy("mds", arrays)
_, addr = env.start_server(ds_dir)


def same(sample_or_batch, idx, what):
    ok = all(np.array_equal(np.asarray(sample_or_batch[k]), arrays[k][idx]) for k in arrays)
    t.check(ok, what + ": equal to the source rows")


# ---- numpy: len, one sample, batches ----------------------------------------------------------
ds = dscache.MapDataset(servers=addr, dataset="mds")
t.check(len(ds) == N, "len(ds) == %d: %d" % (N, len(ds)))
s = ds[7]
t.check(isinstance(s["x"], np.ndarray) and s["x"].shape == (24,) and s["img"].shape == (3, 4, 4)
        and s["label"].shape == (), "one sample: per-sample shapes %s" % {k: v.shape for k, v
                                                                          in s.items()})
same(s, 7, "ds[7]")
same(ds[np.int64(8)], 8, "ds[np.int64(8)]")
same(ds[torch.tensor(9)], 9, "ds[torch.tensor(9)]")
same(ds[-1], N - 1, "ds[-1]: Python semantics")
same(ds[-N], 0, "ds[-N]")
idx = [5, 1499, 0, 5, 77, 1200]
b = ds[idx]
t.check(isinstance(b, dict) and b["x"].shape == (6, 24), "ds[list]: a batch dict [6, ...]")
same(b, idx, "ds[list] with a repeat")
same(ds.__getitems__(np.array(idx)), idx, "__getitems__(ndarray)")
same(ds[10:20:3], list(range(10, 20, 3)), "ds[10:20:3]")
same(ds[[-1, -2]], [N - 1, N - 2], "ds[[-1, -2]]")
kept = [ds[[i, i + 1]] for i in range(0, 600, 50)]  # batches kept: zero-copy, never overwritten
for k, kb in enumerate(kept):
    same(kb, [50 * k, 50 * k + 1], "a batch kept past later requests")
t.check(not b["x"].flags.owndata, "zero-copy: the arrays view the batch")
copied = dscache.MapDataset(servers=addr, dataset="mds", copy=True)[[3, 4]]
same(copied, [3, 4], "copy=True")
t.check(copied["x"].flags.owndata or copied["x"].base is not None, "copy=True gives arrays")

# threads sharing one MapDataset: requests are serialised, each batch its own
import threading  # noqa: E402
bad = []


def reader_thread(seed):
    r = np.random.default_rng(seed)
    for _ in range(40):
        ix = r.integers(0, N, 1 + int(r.integers(0, 50))).tolist()
        b = ds[ix]
        if not all(np.array_equal(np.asarray(b[k]), arrays[k][ix]) for k in arrays):
            bad.append(ix)


threads = [threading.Thread(target=reader_thread, args=(s,)) for s in range(4)]
for th in threads:
    th.start()
for th in threads:
    th.join()
t.check(not bad, "4 threads on one MapDataset: every batch equal to the source (%d bad)"
        % len(bad))

# pickled (spawned DataLoader workers): the arguments travel, a new reader opens on first use
import pickle  # noqa: E402
again = pickle.loads(pickle.dumps(ds))
same(again[[11, 12]], [11, 12], "a pickled MapDataset")
t.check(len(again) == N, "a pickled MapDataset keeps its length")

# the cache: samples read before cost no GET
for j in range(0, 600, 100):
    ds[list(range(j, j + 100))]
st0 = ds.stats()
for i in range(0, 600, 7):
    ds[i]
st1 = ds.stats()
t.check(st1["requests"] == st0["requests"] and st1["wire_bytes"] == st0["wire_bytes"],
        "cached chunks are not fetched again: %d -> %d GETs" % (st0["requests"],
                                                                st1["requests"]))
t.check(st1["checksum_failures"] == 0 and st1["batches"] > 0, "stats: %s" % st1)

# a request larger than batch_size: the reader reopens with room for it, and says so
small = dscache.MapDataset(servers=addr, dataset="mds", batch_size=4)
records = []


class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())


logging.getLogger("dscache").addHandler(Keep())
same(small[list(range(10))], list(range(10)), "10 indices over batch_size=4")
t.check(any("larger than batch_size 4" in m for m in records), "a WARN says the reader reopened")

# ---- bad input ----------------------------------------------------------------------------------
def raises(exc, fn, *words):
    try:
        fn()
    except exc as e:
        msg = str(e)
        t.check(all(w in msg for w in words), "%s says %s: %s" % (exc.__name__, words, msg))
        return msg
    t.check(False, "%s expected" % exc.__name__)


raises(IndexError, lambda: ds[N], "index %d" % N, "%d samples" % N)
raises(IndexError, lambda: ds[-N - 1], "index %d" % (-N - 1), "%d samples" % N)
raises(IndexError, lambda: ds[[0, N + 5]], "index %d" % (N + 5))
raises(TypeError, lambda: ds[1.5], "integers", "float")
raises(TypeError, lambda: ds["x"], "integers", "str")
raises(TypeError, lambda: ds[True], "bool")
raises(TypeError, lambda: ds[[0, 2.0]], "float")
raises(ValueError, lambda: ds[[]], "empty")
raises(ValueError, lambda: dscache.MapDataset(servers=addr, dataset="mds", shuffle=True),
       "shuffle", "sampler")
raises(ValueError, lambda: dscache.MapDataset(servers=addr, dataset="mds", world_size=2),
       "world_size", "DistributedSampler")
raises(TypeError, lambda: dscache.MapDataset(servers=addr, dataset="mds", bogus=1), "bogus")
raises(dscache.NotFound, lambda: dscache.MapDataset(servers=addr, dataset="nope"), "nope",
       "mds")
same(ds[3], 3, "still usable after bad input")

# ---- torch: DataLoader with DistributedSampler on 2 ranks, 0 and 2 workers ---------------------
tds = dscache.torch.MapDataset(servers=addr, dataset="mds", indices=True)
t.check(isinstance(tds[0]["x"], torch.Tensor), "dscache.torch.MapDataset gives tensors")
B = 64
for workers in (0, 2):
    union = []
    for rank in (0, 1):
        sampler = DistributedSampler(tds, num_replicas=2, rank=rank, shuffle=True, seed=4)
        sampler.set_epoch(1)
        dl = DataLoader(tds, batch_size=B, sampler=sampler, num_workers=workers)
        got = []
        for batch in dl:
            t.check(isinstance(batch["x"], torch.Tensor) and batch["x"].shape[1:] == (24,),
                    "DataLoader batch of tensors [B, 24]")
            ix = batch["__index__"].numpy()
            same({k: batch[k].numpy() for k in arrays}, ix, "workers=%d rank %d" % (workers,
                                                                                     rank))
            got += ix.tolist()
        want = list(sampler)
        t.check(got == want, "workers=%d rank %d: exactly the sampler's %d indices, in order"
                % (workers, rank, len(want)))
        union += got
    t.check(sorted(set(union)) == list(range(N)), "workers=%d: the 2 ranks cover every sample"
            % workers)

# the batch-sampler path: ds[list] is one request
bs = BatchSampler(RandomSampler(range(N), generator=torch.Generator().manual_seed(2)), 100,
                  drop_last=False)
want = [list(x) for x in bs]  # a RandomSampler draws anew per pass: replay this one
got = [b["__index__"].tolist() for b in DataLoader(tds, sampler=want, batch_size=None)]
t.check(got == want, "DataLoader(sampler=BatchSampler, batch_size=None): the batches in order")
# getitems=False: the fetcher asks ds[i] per sample and torch collates
per = dscache.torch.MapDataset(servers=addr, dataset="mds", indices=True, getitems=False)
ix = []
for batch in DataLoader(per, batch_size=50, sampler=range(0, N, 3)):
    same({k: batch[k].numpy() for k in arrays}, batch["__index__"].numpy(), "getitems=False")
    ix += batch["__index__"].tolist()
t.check(ix == list(range(0, N, 3)), "getitems=False: the sampler's indices")
# a numpy MapDataset through torch's DataLoader: default_collate gives tensors over the arrays
nb = next(iter(DataLoader(ds, batch_size=8, sampler=range(40, 56))))
t.check(isinstance(nb["x"], torch.Tensor) and nb["x"].shape == (8, 24), "numpy MapDataset in a "
        "DataLoader: a batch of tensors")
same({k: nb[k].numpy() for k in arrays}, list(range(40, 48)), "numpy MapDataset in a DataLoader")
# a custom collate_fn receives the batch dict
seen = []
for batch in DataLoader(tds, batch_size=8, sampler=range(16), collate_fn=lambda b: seen.append(
        type(b).__name__) or b):
    pass
t.check(seen and all(n == "Batch" for n in seen), "collate_fn receives the Batch: %s" % seen)

# ---- variable-length fields ---------------------------------------------------------------------
M = 300
toks = [rng.integers(0, 50000, rng.integers(0, 40)).astype(np.int32) for _ in range(M)]
with dscache.Writer(os.path.join(env.dir, "mvar"), fields={"tok": "i32[]", "y": "i64"},
                    chunk_bytes=2048) as w:
    for i in range(M):
        w.write({"tok": toks[i], "y": i})
_, vaddr = env.start_server(os.path.join(env.dir, "mvar"))
vds = dscache.MapDataset(servers=vaddr, dataset="mvar")
for i in (0, 17, 299, -2):
    s = vds[i]
    t.check(np.array_equal(s["tok"], toks[i]) and int(s["y"]) == i % M,
            "variable field: ds[%d] holds the sample's rows" % i)
vi = [5, 250, 5, 0, 120]
vb = vds[vi]
off = vb["tok_offsets"]
t.check(all(np.array_equal(vb["tok"][off[k]:off[k + 1]], toks[i]) for k, i in enumerate(vi)),
        "variable field: batch values + offsets")
pds = dscache.MapDataset(servers=vaddr, dataset="mvar", pad={"tok": -1})
pb = pds[vi]
t.check(all(np.array_equal(pb["tok"][k][:pb["tok_lengths"][k]], toks[i])
            for k, i in enumerate(vi)), "variable field padded: values + lengths")
sys.exit(t.done())
