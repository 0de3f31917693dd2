"""dscache.Loader(order=sampler) through a real dscached (docs/order.md#the-callers-order):
batches equal the sampler's order batch for batch, byte-equal to the source arrays, for a
flat list (with and without drop_last; its second epoch served from the chunks kept, with no
fetch), a numpy array, index batches of varying size (a
Megatron-style batch sampler) and, with torch, a BatchSampler; torch's DistributedSampler on 2
ranks gives each rank exactly its indices (over two epochs, set_epoch between); a loader
stopped mid-epoch resumes exactly in a new loader given a sampler in the same state (and one in
another state is refused with BadState); hints go out along the caller's order (a read-through
server stages the hinted chunks and serves GETs from them, none left unused, several times more
than with the queue's hints alone); every bad input
(not an index, out of range, negative, rank / shuffle options with order=, drop_last with
batches, an oversized or empty batch, a used-up generator) raises a clear error naming it."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

try:
    import torch
    from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler
except ImportError:
    torch = None

env = te.Env()
t = te.Checks()
# Hints along the caller's order: a server that reads through (nothing resident: no --warm)
# with read-ahead staging; a loader whose cache holds a few batches' chunks, with a consumer
# slow enough for the hint horizon to measure its steps, names the chunks of the batches pushed
# ahead (beyond what it plans) before it asks for them. The server stages them and answers GETs
# from them; a staged range never asked for would be dropped unused after --staging-ttl. Run in
# a child process each (DSCACHE_HINT_SECONDS is read once per process): with the horizon, and
# with hints of the queue only (DSCACHE_HINT_SECONDS=0), which stages several times fewer.
def hint_run():
    hz_n = 6000
    hz = env.ingest_npy("hzds", {"v": np.arange(hz_n * 64, dtype=np.int64).reshape(hz_n, 64)},
                        compress="none", chunk_size="16K")
    port_file = os.path.join(env.dir, "hz.port")
    proc = subprocess.Popen(te.DIE_WITH_TEST + [
        os.path.join(te.BIN, "dscached"), "--listen", "127.0.0.1:0", "--http", "off",
        "--port-file", port_file, "--log-level", "error", "--threads", "2", "--data", hz,
        "--memory", "1M", "--staging-ttl", "1"])
    env.procs.append(proc)
    for _ in range(200):
        if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
            break
        time.sleep(0.05)
    hz_addr = "127.0.0.1:" + open(port_file).read().strip()
    order = np.random.default_rng(3).permutation(hz_n)[:1200]
    ld = dscache.Loader(servers=[hz_addr], dataset="hzds", batch_size=8, order=order,
                        indices=True, cache_bytes=64 << 10, inflight_bytes=32 << 10,
                        order_ahead=64)
    got = []
    for batch in ld:
        t.check(np.array_equal(batch["v"], (batch["__index__"][:, None] * 64 +
                                            np.arange(64)).astype(np.int64)), "hz batch bytes")
        got.extend(batch["__index__"].tolist())
        time.sleep(0.004)
    t.check(got == order.tolist(), "hz: the caller's order")
    ld.close()
    time.sleep(2.5)  # past --staging-ttl: what was staged and never asked for is dropped
    stat = json.loads(subprocess.run([os.path.join(te.BIN, "dscache"), "stat", "--server",
                                      hz_addr, "--json"], check=True,
                                     capture_output=True).stdout)
    sg = stat["store"]["staging"]
    print(json.dumps({k: sg[k] for k in ("hints", "accepted", "staged", "hits", "joined",
                                         "dropped_unused")}))
    return t.done()


if sys.argv[1:] == ["hints"]:
    sys.exit(hint_run())
N = 1000
B = 16
rng = np.random.default_rng(5)
arrays = {"x": rng.integers(0, 2**31, (N, 6), dtype=np.int64),
          "y": rng.standard_normal((N, 3)).astype(np.float32)}
ds = env.ingest_npy("callds", arrays, chunk_size="2K")
_, addr = env.start_server(ds)


def loader(order, **kw):
    kw.setdefault("batch_size", B)
    return dscache.Loader(servers=[addr], dataset="callds", indices=True, order=order, **kw)


def batches(ld, steps=None):
    """The epoch's batches' indices (checked byte for byte against the source)."""
    got = []
    for k, batch in enumerate(ld):
        idx = np.asarray(batch["__index__"])
        t.check(np.array_equal(np.asarray(batch["x"]), arrays["x"][idx]) and
                np.array_equal(np.asarray(batch["y"]), arrays["y"][idx]),
                "batch %d bytes equal the source" % k)
        got.append(idx.tolist())
        if steps is not None and k + 1 == steps:
            break
    return got


def cut(flat, size, drop_last=False):
    out = [list(flat[i:i + size]) for i in range(0, len(flat), size)]
    if drop_last and out and len(out[-1]) < size:
        out.pop()
    return out


# A flat list (a permutation with repeats), cut into batch_size batches; drop_last drops the
# short last one; two epochs give the same list twice.
perm = rng.permutation(N).tolist() + [3, 3, 999, 0, 17]
ld = loader(perm)
t.check(batches(ld) == cut(perm, B), "flat list: batch for batch")
t.check(batches(ld) == cut(perm, B), "flat list: second epoch the same")
st = ld.stats()
t.check(st["epoch"] == 2 and len(ld) == len(cut(perm, B)), "two epochs, len")
# The dataset fits in cache_bytes: the chunks decoded for epoch 0 are kept for epoch 1 (whose
# order the loader learns only when it starts), which fetches nothing.
t.check(st["epoch_wire_bytes"] == 0 and st["wire_bytes"] > 0,
        "second epoch from kept chunks: %d wire bytes (%d in all)"
        % (st["epoch_wire_bytes"], st["wire_bytes"]))
ld.close()
ld = loader(perm, drop_last=True)
t.check(batches(ld) == cut(perm, B, True), "flat list, drop_last")
ld.close()
arr = np.asarray(perm[:333], dtype=np.int32)
ld = loader(arr)
t.check(batches(ld) == cut(arr.tolist(), B), "numpy int32 array")
ld.close()


class MegatronLike:
    """A batch sampler of its own: batches of varying size, a different order each epoch."""

    def __init__(self, n, size):
        self.n, self.size, self.epoch = n, size, 0

    def set_epoch(self, e):
        self.epoch = e

    def batches(self):
        g = np.random.default_rng(100 + self.epoch)
        idx = g.permutation(self.n)
        out, at = [], 0
        while at < self.n:
            k = int(g.integers(1, self.size + 1))
            out.append(idx[at:at + k].tolist())
            at += k
        return out

    def __iter__(self):
        return iter(self.batches())

    def __len__(self):
        return len(self.batches())


ms = MegatronLike(N, B)
ld = loader(ms)
for e in range(2):
    ms.set_epoch(e)
    t.check(batches(ld) == ms.batches(), "index batches as they are, epoch %d" % e)
t.check(len(ld) == len(ms), "len of a batch sampler")
ld.close()

if torch is not None:
    bs = BatchSampler(RandomSampler(range(N), generator=torch.Generator().manual_seed(1)), B,
                      drop_last=False)
    ld = loader(bs)
    torch.manual_seed(0)
    want = [list(b) for b in BatchSampler(RandomSampler(
        range(N), generator=torch.Generator().manual_seed(1)), B, drop_last=False)]
    t.check(batches(ld) == want, "torch BatchSampler")
    ld.close()

    # DistributedSampler on 2 ranks: each rank gets exactly its sampler's indices, in order;
    # together every sample (the sampler pads to a multiple of 2: N is even, no padding).
    seen = []
    for e in range(2):
        union = []
        for r in range(2):
            s = DistributedSampler(range(N), num_replicas=2, rank=r, shuffle=True, seed=7)
            s.set_epoch(e)
            ld = loader(s, output="torch")
            if e == 1:
                ld.set_epoch(1)
            got = batches(ld)
            t.check(got == cut(list(s), B), "DistributedSampler rank %d epoch %d" % (r, e))
            union.extend(i for b in got for i in b)
            ld.close()
        t.check(sorted(union) == list(range(N)), "2 ranks: every sample once, epoch %d" % e)
        seen.append(union)
    t.check(seen[0] != seen[1], "set_epoch: another order")

    # Stop mid-epoch, state_dict, a new loader and a new sampler in the same state continue
    # exactly; a sampler in another state is refused.
    def dist(epoch, seed=7):
        s = DistributedSampler(range(N), num_replicas=2, rank=1, shuffle=True, seed=seed)
        s.set_epoch(epoch)
        return s

    s = dist(3)
    ld = loader(s)
    ld.set_epoch(3)
    first = batches(ld, steps=11)
    state = ld.state_dict()
    ld.close()
    t.check(state["epoch"] == 3 and state["batches"] == 11 and state["samples"] == 11 * B,
            "state: epoch 3, 11 batches, %d samples: %r" % (11 * B, state))
    s2 = dist(state["epoch"])
    ld = loader(s2)
    ld.load_state_dict(state)
    rest = batches(ld)
    t.check(first + rest == cut(list(dist(3)), B), "resumed: the rest of the epoch exactly")
    t.check(ld.stats()["epoch"] == 4, "resumed epoch ends")
    ld.close()
    ld = loader(dist(2))
    ld.load_state_dict(state)
    try:
        batches(ld)
        t.check(False, "a sampler in another state: BadState")
    except dscache.BadState as e:
        t.check("not the one the state was saved with" in str(e) and "set_epoch(3)" in str(e),
                "BadState says why: %s" % e)
    ld.close()


# Bad input: each a clear error naming what it got and where.
def raises(exc, says, make, iterate=True):
    try:
        ld = make()
        if iterate:
            batches(ld)
        t.check(False, "%s expected (%s)" % (exc.__name__, says))
    except exc as e:
        t.check(all(w in str(e) for w in says), "%s says %r: %s" % (exc.__name__, says, e))


raises(TypeError, ["2.5 (float)", "position 17"], lambda: loader(list(range(17)) + [2.5]))
raises(TypeError, ["'7' (str)", "position 0"], lambda: loader(["7", 1]))
raises(TypeError, ["None (NoneType)", "position 3"], lambda: loader([0, 1, 2, None]))
raises(TypeError, ["True (bool)", "position 1"], lambda: loader([0, True]))
raises(TypeError, ["batch 1 is 5 (int)"], lambda: loader([[0, 1], 5]))
raises(TypeError, ["1.5 (float)", "batch 1, item 2"], lambda: loader([[0], [1, 2, 1.5]]))
raises(IndexError, ["index 1000", "position 20", "1000 samples"],
       lambda: loader(list(range(20)) + [N]))
raises(IndexError, ["index 5000", "batch 2, item 0", "1000 samples"],
       lambda: loader([[1], [2], [5000]]))
raises(IndexError, ["index -1", "position 2", "negative"], lambda: loader([4, 5, -1]))
raises(IndexError, ["index -3", "negative"], lambda: loader(np.array([[0, -3]])))
raises(dscache.InvalidOption, ["batch 0 holds 17 indices", "batch_size (16)"],
       lambda: loader([list(range(17))]))
raises(dscache.InvalidOption, ["batch 1 holds 0 indices"], lambda: loader([[1], []]))
raises(dscache.InvalidOption, ["drop_last does not apply"],
       lambda: loader([[1, 2]], drop_last=True))
for kw, says in (({"rank": 0}, "rank"), ({"world_size": 2}, "world_size"),
                 ({"shuffle": True}, "shuffle"), ({"shuffle": False}, "shuffle"),
                 ({"shuffle_window": 64}, "shuffle_window"), ({"epochs": 1}, "epochs")):
    raises(dscache.InvalidOption, [says], lambda: loader([1, 2], **kw), iterate=False)
raises(TypeError, ["a sampler"], lambda: loader(5), iterate=False)
gen_ld = loader(i for i in range(40))
t.check(len(batches(gen_ld)) == 3, "a generator: one epoch")
raises(ValueError, ["no index for this epoch", "used up"], lambda: gen_ld)
gen_ld.close()
# The loader stays usable after a bad item is refused: set_epoch starts the order again.
items = [0, 1, 2, "x"]
ld = loader(items, batch_size=2)
raises(TypeError, ["'x' (str)", "position 3"], lambda: ld)
items[3] = 3
ld.set_epoch(5)
t.check(batches(ld) == [[0, 1], [2, 3]], "usable after a refused item")
ld.close()

runs = {}
for name, extra in (("horizon", {}), ("queue", {"DSCACHE_HINT_SECONDS": "0"})):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "hints"],
                       env=dict(os.environ, **extra), capture_output=True, text=True)
    t.check(p.returncode == 0, "hint run %s: %s" % (name, p.stderr[-2000:]))
    runs[name] = json.loads(p.stdout.strip().splitlines()[-2]) if p.returncode == 0 else None
    print("staging, %s: %s" % (name, runs[name]))
if runs["horizon"] and runs["queue"]:
    h, q = runs["horizon"], runs["queue"]
    t.check(h["accepted"] > 0 and h["hits"] + h["joined"] > 0,
            "hinted chunks were staged and GETs answered from them")
    t.check(h["dropped_unused"] == 0, "no staged range left unused (%d): the hints followed "
            "the caller's order" % h["dropped_unused"])
    t.check(h["hits"] + h["joined"] > 2 * (q["hits"] + q["joined"]),
            "the horizon reads ahead along the pushed order: %d GETs from staged ranges, %d with "
            "the queue's hints only" % (h["hits"] + h["joined"], q["hits"] + q["joined"]))

sys.exit(t.done())
