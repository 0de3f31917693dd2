"""dscache.Loader order= keyword through a real dscached: order="local" (default) and "global"
each give every sample once across 3 ranks with the right bytes; a state_dict taken on rank 0
of a 4-rank job mid-epoch resumes on 2 ranks with every remaining sample exactly once; a state
of one order is refused by the other; a bad order name is a ValueError; a cache_bytes too small
for the window is a RuntimeWarning (the defaults give none); stats()["epoch_wire_bytes"] holds
the bytes fetched for the last completed epoch (all of it for a lone rank's first epoch)."""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
N = 1000
rng = np.random.default_rng(9)
arrays = {"x": rng.integers(0, 2**31, (N, 6), dtype=np.int64)}
ds = env.ingest_npy("ordds", arrays, chunk_size="2K")
_, addr = env.start_server(ds)


def loader(rank, world, order="local"):
    return dscache.Loader(servers=[addr], dataset="ordds", batch_size=16, seed=4, rank=rank,
                          world_size=world, indices=True, order=order)


def take(ld, steps=None):
    got = []
    for k, batch in enumerate(ld):
        idx = batch["__index__"]
        t.check(np.array_equal(batch["x"], arrays["x"][idx]), "batch bytes")
        got.extend(idx.tolist())
        if steps is not None and k + 1 == steps:
            break
    return got


for order in ("local", "global"):
    seen = []
    for r in range(3):
        ld = loader(r, 3, order)
        seen.extend(take(ld))
        ld.close()
    pad = (3 - N % 3) % 3
    t.check(len(seen) == N + pad and set(seen) == set(range(N)), order + ": exactly once")

# 4 ranks, 5 steps each, state from rank 0; resume on 2 ranks.
seen, state = [], None
for r in range(4):
    ld = loader(r, 4)
    seen.extend(take(ld, 5))
    if r == 0:
        state = ld.state_dict()
    ld.close()
for r in range(2):
    ld = loader(r, 2)
    ld.load_state_dict(state)
    seen.extend(take(ld))
    ld.close()
rest = N - 4 * 5 * 16
t.check(set(seen) == set(range(N)) and len(seen) == N + (2 - rest % 2) % 2, "4 -> 2 resume")

# One rank, one epoch: every chunk is fetched for epoch 0's steps (and nothing else is fetched
# before its end but what the planner took for epoch 1, at most one epoch ahead).
ld = loader(0, 1)
t.check(ld.stats()["epoch_wire_bytes"] == 0, "epoch_wire_bytes 0 before an epoch ends")
take(ld)
st = ld.stats()
stored = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds) if f.endswith(".dsc"))
t.check(st["epoch"] == 1, "one epoch done")
t.check(0.9 * stored <= st["epoch_wire_bytes"] <= st["wire_bytes"],
        "epoch_wire_bytes %d: the stored size %d, at most wire_bytes %d"
        % (st["epoch_wire_bytes"], stored, st["wire_bytes"]))
ld.close()

ld = loader(0, 1, "global")
try:
    ld.load_state_dict(state)
    t.check(False, "a local-order state is refused by a global-order loader")
except dscache.Error as e:
    t.check(e.name == "DSC_EBADSTATE", "refused with DSC_EBADSTATE")
ld.close()
try:
    loader(0, 1, "nearby")
    t.check(False, "bad order name")
except ValueError:
    pass
# A cache_bytes too small for the window: a RuntimeWarning even with logging not configured.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ld = dscache.Loader(servers=[addr], dataset="ordds", batch_size=16, shuffle_window=600,
                        cache_bytes=20000)
    ld.close()
t.check(any("raise cache_bytes to" in str(w.message) for w in caught), "cache warning")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loader(0, 1).close()  # defaults: sized from the dataset, no warning
t.check(not caught, "no warning with defaults")
sys.exit(t.done())
