"""The map-style reader and the caller's order fetch the chunks a request needs with scattered
requests (MGET, up to 64 chunks of any shards each) instead of one GET per chunk: a batch of
samples spread over many non-consecutive chunks costs a few requests (stats "requests"), byte-equal
to the source. Old code sent one request per chunk (runs of consecutive chunks aside)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
N = 4000
SPC = 20  # 200-byte samples in 4000-byte chunks (--chunk-size 4K, raw)
rng = np.random.default_rng(3)
arrays = {"x": rng.integers(0, 256, (N, 200), dtype=np.uint8)}
d = env.ingest_npy("mg", arrays, compress="none", chunk_size="4K")
_, addr = env.start_server(d)

# One sample of every other chunk: no two chunks of a request are consecutive, so GETs could
# not merge any of them.
idx = np.arange(0, N, 2 * SPC)[:128]
rng.shuffle(idx)
chunks = len(idx)

# ---- the map-style reader: one __getitems__ ---------------------------------------------------
ds = dscache.MapDataset(servers=addr, dataset="mg", batch_size=256)
one = dscache.MapDataset(servers=addr, dataset="mg", batch_size=256)
one[0]
chunk_wire = one.stats()["wire_bytes"]
b = ds[idx.tolist()]
t.check(np.array_equal(b["x"], arrays["x"][idx]), "reader batch equals the source rows")
s = ds.stats()
fetched = round(s["wire_bytes"] / chunk_wire)
t.check(fetched == chunks, "reader fetched each of the %d chunks once (%d)" % (chunks, fetched))
t.check(s["requests"] * 8 <= chunks,
        "reader: %d chunks in %d requests (scattered MGETs; one GET each before)"
        % (chunks, s["requests"]))
# The cached chunks answer the same request again without any request.
b = ds[idx.tolist()]
t.check(ds.stats()["requests"] == s["requests"], "a repeated request sends nothing")

# ---- the caller's order: the look-ahead's chunks grouped into scattered requests --------------
order = [idx[i:i + 32].tolist() for i in range(0, chunks, 32)]
ld = dscache.Loader(servers=[addr], dataset="mg", batch_size=32, indices=True, order=order)
got = []
for batch in ld:
    k = np.asarray(batch["__index__"])
    t.check(np.array_equal(np.asarray(batch["x"]), arrays["x"][k]), "order batch bytes")
    got.append(k.tolist())
t.check(got == order, "order=: batches in the caller's order")
s = ld.stats()
t.check(s["requests"] * 4 <= chunks,
        "order=: %d chunks in %d requests (scattered MGETs; one GET each before)"
        % (chunks, s["requests"]))
ld.close()
env.close()
t.done()
