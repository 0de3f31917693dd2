"""Mixtures (dscache.Loader(sources=[dscache.Source(...)])) over real dscached servers: three
sources (one on its own server, one with an extra field) weighted 0.6 / 0.3 / 0.1. Shares within
one sample of the weights at every step, the same composition on every rank; each source's
samples exactly once per source-epoch across 2 and 4 ranks, in its own loader's order; stopping
at a random step and resuming in a new loader continues byte for byte; exhausted="stop"; per
source stats; every bad input gets its error naming the culprit."""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
SIZES = {"web": 240, "code": 120, "books": 40}
BASE = {"web": 0, "code": 100000, "books": 200000}


def toks(name, i):
    return np.arange(1 + (i * 7) % 23, dtype=np.int32) + BASE[name] + i


dirs = {}
for name, n in SIZES.items():
    fields = {"tokens": "i32[]", "id": "i64"}
    if name == "code":
        fields["lang"] = "i64"  # a field the others lack: fine while it is not needed
    d = dirs[name] = os.path.join(env.dir, name)
    with dscache.Writer(d, name=name, fields=fields, chunk_bytes=1024) as w:
        for i in range(n):
            rec = {"tokens": toks(name, i), "id": BASE[name] + i}
            if name == "code":
                rec["lang"] = i % 3
            w.write(rec)
odd = os.path.join(env.dir, "odd")
with dscache.Writer(odd, name="odd", fields={"tokens": "i64[]", "id": "i64"}) as w:
    for i in range(10):
        w.write({"tokens": np.arange(3, dtype=np.int64), "id": i})
langonly = os.path.join(env.dir, "langonly")  # none of the others' fields
with dscache.Writer(langonly, name="langonly", fields={"lang": "i64"}) as w:
    for i in range(10):
        w.write({"lang": i})
_, addr = env.start_server(dirs["web"], dirs["books"], odd, langonly)
_, code_addr = env.start_server(dirs["code"])  # a source on its own server group
NAMES = ["web", "code", "books"]
W = [0.6, 0.3, 0.1]
B = 10


def sources(weights=W):
    return [dscache.Source("web", weight=weights[0]),
            dscache.Source("code", weight=weights[1], servers=code_addr),
            dscache.Source("books", weight=weights[2])]


def mixture(**kw):
    args = dict(sources=sources(), servers=addr, batch_size=B, seed=7, shuffle_window=32,
                fields=["tokens", "id"])
    args.update(kw)
    return dscache.Loader(**args)


def check_batch(b, what):
    """Values equal the written samples; returns [(source, index)]."""
    out, ok = [], True
    o = b["tokens_offsets"]
    for k in range(len(b["source"])):
        s, i = int(b["source"][k]), int(b["__index__"][k])
        name = NAMES[s]
        ok = ok and int(b["id"][k]) == BASE[name] + i
        ok = ok and np.array_equal(b["tokens"][o[k]:o[k + 1]], toks(name, i))
        out.append((s, i))
    t.check(ok, what + ": values are the written samples of the named source")
    return out


def run_ranks(world, steps):
    """Per rank: the batches of `steps` steps."""
    res = []
    for r in range(world):
        m = mixture(rank=r, world_size=world)
        res.append([next(m) for _ in range(steps)])
        if r == 0:
            st = m.stats()
            t.check(set(st["sources"]) == set(NAMES) and
                    sum(v["samples"] for v in st["sources"].values()) == steps * B and
                    all(v["wire_bytes"] > 0 for v in st["sources"].values()),
                    "stats()['sources']: samples and bytes per source")
        m.close()
    return res


def plain_epoch(k, rank, world):
    """The source's own loader (as the mixture makes it): its epoch-0 indices on this rank."""
    m = mixture(rank=rank, world_size=world)
    bs = m.source_batch_sizes[k]
    m.close()
    ld = dscache.Loader(servers=code_addr if k == 1 else addr, dataset=NAMES[k], batch_size=bs,
                        seed=7 + k, rank=rank, world_size=world, shuffle_window=32, indices=True)
    out = [int(i) for b in ld for i in b["__index__"]]
    ld.close()
    return out


for world in (2, 4):
    steps = 80  # books: 40 samples at 1 a step, over 2 or 4 ranks: 2+ source-epochs each
    res = run_ranks(world, steps)
    comp = [[list(b["source"]) for b in rb] for rb in res]
    t.check(all(c == comp[0] for c in comp), "world %d: the same composition on every rank"
            % world)
    counts = [0, 0, 0]
    ok = True
    for step, b in enumerate(res[0]):
        for s in b["source"]:
            counts[s] += 1
        n = (step + 1) * B
        ok = ok and all(abs(counts[s] - n * W[s]) < 1 for s in range(3))
    t.check(ok, "world %d: every source within one sample of its share after every step (%s)"
            % (world, counts))
    for k in range(3):
        union = []
        for r in range(world):
            got = [i for b in res[r] for s, i in check_batch(b, "world %d rank %d" % (world, r))
                   if s == k]
            want = plain_epoch(k, r, world)
            t.check(got[:len(want)] == want, "world %d rank %d source %s: its first source-epoch"
                    " is its own loader's epoch, in order" % (world, r, NAMES[k]))
            union += got[:len(want)]
        t.check(all(int(e) == 0 for rb in res for x in rb[:10] for e in
                    x["source_epoch"][x["source"] == 2]) and
                any(int(e) == 1 for rb in res for x in rb for e in x["source_epoch"]),
                "world %d: batch['source_epoch'] counts each source's epochs" % world)
        t.check(sorted(union) == list(range(SIZES[NAMES[k]])),
                "world %d source %s: each sample exactly once per source-epoch across ranks"
                % (world, NAMES[k]))

# Stop at a random step, resume in a new loader (2 ranks, rank 1): byte for byte.
rnd = random.Random(int(os.environ.get("DSC_TEST_SEED", "5")))
stop = rnd.randrange(3, 40)
ref = mixture(rank=1, world_size=2)
want = [next(ref) for _ in range(stop + 15)][stop:]
ref.close()
a = mixture(rank=1, world_size=2)
for _ in range(stop):
    next(a)
state = a.state_dict()
a.close()
b = mixture(rank=1, world_size=2)
b.load_state_dict(state)
got = [next(b) for _ in range(15)]
t.check(all(set(x) == set(y) and all(np.array_equal(x[k], y[k]) for k in x)
            for x, y in zip(want, got)), "resume at step %d: the next 15 batches byte for byte"
        % stop)
b.close()

# Stop at a random step on 2 ranks, resume on 4 (and on 1): every sample of each source's
# first source-epoch delivered exactly once over the old and the new ranks (the state of any
# rank resumes every rank), the values those of the named samples.
def source_epoch_counts(batches_by_rank):
    seen = [dict() for _ in NAMES]
    for rb in batches_by_rank:
        for x in rb:
            for s, i in check_batch(x, "world change"):
                seen[s][i] = seen[s].get(i, 0) + 1
    return seen


W2 = [0.55, 0.3, 0.15]  # 5.5 / 3 / 1.5 samples a step: source batches part-used at a stop
for new_world in (4, 1, 3):
    stop = rnd.randrange(2, 15)
    before, states = [], []
    for r in range(2):
        m = mixture(rank=r, world_size=2, sources=sources(W2))
        before.append([next(m) for _ in range(stop)])
        states.append(m.state_dict())
        m.close()
    t.check(states[0]["dscache_mixture"]["sources"] == states[1]["dscache_mixture"]["sources"],
            "the mixture state is the same on every rank")
    skips = [x["skip"] for x in states[0]["dscache_mixture"]["sources"]]
    after = []
    for r in range(new_world):
        m = mixture(rank=r, world_size=new_world, sources=sources(W2))
        m.load_state_dict(states[0])
        # Enough steps that each source finishes its first source-epoch on every rank.
        after.append([next(m) for _ in range(48 // new_world + 4)])
        m.close()
    # Each source's first source-epoch (batch["source_epoch"] 0), over the old ranks' batches
    # and the new ranks': every sample once, but for the loader's padding of a new segment to a
    # multiple of the world size (docs/order.md): at most new_world - 1 repeats.
    ok, why = True, []
    for k in range(3):
        n = SIZES[NAMES[k]]
        counts = {}
        for rb in before + after:
            for x in rb:
                for (s, i), e in zip(check_batch(x, "world change"), x["source_epoch"]):
                    if s == k and e == 0:
                        counts[i] = counts.get(i, 0) + 1
        dup = sum(c - 1 for c in counts.values())
        ok = ok and sorted(counts) == list(range(n)) and dup <= new_world - 1
        why.append("%s %d of %d, %d repeats" % (NAMES[k], len(counts), n, dup))
    t.check(ok, "2 ranks -> %d ranks at step %d (skips %s): each source's first epoch exactly "
            "once (%s)" % (new_world, stop, skips, ", ".join(why)))
    print("2 -> %d ranks at step %d, skips %s: %s" % (new_world, stop, skips, ", ".join(why)))

# exhausted="stop": the epoch ends when a source runs out (books: 40 samples, 1 a step).
m = mixture(exhausted="stop")
ep = list(m)
n = sum(len(x["source"]) for x in ep)
books = sum(int((x["source"] == 2).sum()) for x in ep)
t.check(books == 40 and len(ep) in (40, 41), "stop: the epoch ends with the books source "
        "(%d batches, %d samples, %d books)" % (len(ep), n, books))
ep2 = [next(m) for _ in range(3)]
t.check(len(ep2) == 3 and m.epoch == 1, "stop: the next epoch goes on")
m.close()


# repeat: books twice per source-epoch (each sample exactly twice across 2 ranks), code half
# (a deterministic half: each rank's first ceil(120 / 2) / 2 = 30 of its pass, then the next
# source-epoch takes the first 30 of the next loader epoch).
def repeat_run(rank, resume_at=None):
    srcs = lambda: [dscache.Source("web", weight=0.6),  # noqa: E731
                    dscache.Source("code", weight=0.3, servers=code_addr, repeat=0.5),
                    dscache.Source("books", weight=0.1, repeat=2.0)]
    m = mixture(sources=srcs(), rank=rank, world_size=2)
    out = []
    for step in range(90):
        if step == resume_at:  # a new loader from the state (inside a part pass of code)
            state = m.state_dict()
            m.close()
            m = mixture(sources=srcs(), rank=rank, world_size=2)
            m.load_state_dict(state)
        out.append(next(m))
    m.close()
    return out


runs = [repeat_run(0), repeat_run(1)]
# At a random step, and at step 20, where code's part pass (30 samples, 3 a step) has just
# ended: its loader batch is cut short there, and the samples the state says were used of it
# are not skipped again in the next loader epoch.
for at in (rnd.randrange(5, 60), 20):
    resumed = repeat_run(1, resume_at=at)
    t.check(all(set(x) == set(y) and all(np.array_equal(x[k], y[k]) for k in x)
                for x, y in zip(runs[1], resumed)),
            "repeat: a resume at step %d continues byte for byte" % at)
again = repeat_run(1)
t.check(all(np.array_equal(x["__index__"], y["__index__"]) for x, y in zip(runs[1], again)),
        "repeat: deterministic")
for k, want_epoch0, times in ((2, 40, 2), (1, 60, 1)):
    counts = {}
    per_epoch = {}
    for rb in runs:
        for x in rb:
            for (s, i), e in zip(check_batch(x, "repeat"), x["source_epoch"]):
                if s == k:
                    per_epoch.setdefault(int(e), {}).setdefault(i, 0)
                    per_epoch[int(e)][i] += 1
    e0 = per_epoch.get(0, {})
    t.check(len(e0) == want_epoch0 and all(c == times for c in e0.values()),
            "repeat %s: source-epoch 0 holds %d samples %d times each (got %d samples, counts %s)"
            % (NAMES[k], want_epoch0, times, len(e0), sorted(set(e0.values()))))
    if k == 1:
        e1 = per_epoch.get(1, {})
        t.check(len(e1) == 60 and set(e1.values()) == {1} and set(e1) != set(e0),
                "repeat 0.5: source-epoch 1 takes 60 samples of the next loader epoch")



# repeat onto another world size, stopped inside code's part pass (0.5: 30 of each old rank's 60
# samples, 3 a step): the new ranks deliver the rest of the old ranks' part pass (old rank r's
# by new rank r % W') and nothing else of that source-epoch, so its samples are the old world's;
# then each source-epoch is the new world's own part pass (W' x cut', no sample twice).
def repeat_srcs():
    return [dscache.Source("web", weight=0.6),
            dscache.Source("code", weight=0.3, servers=code_addr, repeat=0.5),
            dscache.Source("books", weight=0.1, repeat=2.0)]


def code_epochs(batches, into):
    for x in batches:
        for s, i, e in zip(x["source"], x["__index__"], x["source_epoch"]):
            if int(s) == 1:
                into.setdefault(int(e), []).append(int(i))


ref = {}
for r in range(2):
    code_epochs(runs[r], ref)
for new_w in (3, 1):
    stop = 10 * rnd.randrange(1, 4) + rnd.randrange(1, 10)
    got = {}
    for r in range(2):
        code_epochs(runs[r][:stop], got)
    m = mixture(sources=repeat_srcs(), rank=0, world_size=2)
    for _ in range(stop):
        next(m)
    st = m.state_dict()
    m.close()
    for r in range(new_w):
        y = mixture(sources=repeat_srcs(), rank=r, world_size=new_w)
        y.load_state_dict(st)
        code_epochs([next(y) for _ in range(60)], got)
        y.close()
    e = stop // 10
    cut_new = round(0.5 * -(-120 // new_w))
    t.check(sorted(got.get(e, [])) == sorted(ref[e]),
            "repeat 0.5, 2 -> %d ranks at step %d: source-epoch %d holds the old world's part "
            "pass (%d samples, want %d)" % (new_w, stop, e, len(got.get(e, [])), len(ref[e])))
    nxt = got.get(e + 1, [])
    t.check(len(nxt) == new_w * cut_new and len(set(nxt)) == len(nxt),
            "repeat 0.5 on %d ranks: the next source-epoch is theirs (%d samples, want %d, "
            "%d distinct)" % (new_w, len(nxt), new_w * cut_new, len(set(nxt))))
    if new_w == 1:  # saved while the old part pass's rest is delivered: resumes it exactly
        y = mixture(sources=repeat_srcs(), rank=0, world_size=1)
        y.load_state_dict(st)
        for _ in range(3):
            next(y)
        mid = y.state_dict()
        cont = [next(y) for _ in range(8)]
        y.close()
        z = mixture(sources=repeat_srcs(), rank=0, world_size=1)
        z.load_state_dict(mid)
        again = [next(z) for _ in range(8)]
        z.close()
        t.check(all(set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
                    for a, b in zip(cont, again)),
                "repeat 0.5: a state saved while the old part pass's rest is delivered resumes "
                "byte for byte")


# Traffic per source: over a completed source-epoch (1 rank, then 2), each source's loader
# fetched about its stored bytes once (<= 1.1x).
def stored(name):
    d = dirs.get(name)
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f != "manifest.json")


for world in (1, 2):
    wire = [0, 0, 0]
    for r in range(world):
        m = mixture(rank=r, world_size=world, sources=sources())
        for _ in range(50 // world + 2):  # past every source's first epoch on this rank
            next(m)
        st = m.stats()["sources"]
        for k in range(3):
            wire[k] += st[NAMES[k]]["epoch_wire_bytes"]
        m.close()
    t.check(all(0 < wire[k] <= 1.1 * stored(NAMES[k]) for k in range(3)),
            "world %d: each source's epoch wire bytes %s within 1.1x of its stored bytes %s"
            % (world, wire, [stored(n) for n in NAMES]))

# A packed mixture: each source's documents packed into rows of 16, rows blended; unpacking by
# (source, segment_index, segment_start) gives every document of each source once per epoch.
def unpack_mixture(batches, repeats=0):
    """True when the source-epoch-0 rows of packed mixture batches (in delivery order) hold
    every document of each source, each in order and whole, and at most `repeats` documents of
    a source twice (the loader's padding when a rank split does not come out even)."""
    docs = [dict() for _ in NAMES]  # per source: document -> its deliveries (lists of pieces)
    ok = True
    for x in batches:
        flat, cu = x["tokens"].reshape(-1), x["cu_seqlens"]
        ok = ok and len(cu) == len(x["segment_index"]) + 1 and cu[-1] == flat.size
        for g in range(len(x["segment_index"])):
            d = int(x["segment_index"][g])
            if d < 0:
                continue
            row = int(cu[g]) // 16
            if int(x["source_epoch"][row]) != 0:  # the first source-epoch of each source only
                continue
            s = int(x["source"][row])
            runs = docs[s].setdefault(d, [[]])
            done = sum(len(v) for v in runs[-1])
            if done == len(toks(NAMES[s], d)) and int(x["segment_start"][g]) == 0:
                runs.append([])  # delivered again from its start
                done = 0
            ok = ok and done == int(x["segment_start"][g])  # in order
            runs[-1].append(flat[cu[g]:cu[g + 1]])
    for k in range(3):
        n = SIZES[NAMES[k]]
        ok = ok and all(np.array_equal(np.concatenate(run), toks(NAMES[k], i))
                        for i in range(n) if i in docs[k] for run in docs[k][i])
        ok = ok and len(docs[k]) == n
        ok = ok and sum(len(v) - 1 for v in docs[k].values()) <= repeats
    return ok


m = mixture(pack={"tokens": 16}, batch_size=10)
t.check(unpack_mixture([next(m) for _ in range(60)]),
        "packed mixture: every document of each source rebuilt from its segments")
saved = [m.state_dict()]
m.close()

try:
    import torch  # noqa: F401
    m = mixture(output="torch")
    x = next(m)
    t.check(type(x["tokens"]).__name__ == "Tensor" and x["source"].dtype == torch.int32,
            "output='torch': tensors")
    m.close()
except ImportError:
    print("torch missing: output='torch' not checked")


# epochs=1: the mixture ends when a source has no epoch left (books: 40 samples at 1 a step),
# instead of waiting on it for ever.
m = mixture(epochs=1)
n = sum(1 for _ in m)
t.check(40 <= n <= 41 and sum(1 for _ in m) == 0, "epochs=1: the mixture ends (%d steps)" % n)
m.close()


def refused(what, exc, needles, fn):
    try:
        x = fn()
        x.close()
    except exc as e:
        t.check(all(s in str(e) for s in needles), "%s: %r names %s" % (what, str(e), needles))
        return
    t.check(False, what + ": refused")


# Another world size from every old rank's state: each source's documents are packed once over
# the old ranks (before the stop) and the new ranks (after it), whole and in order; rank 0's
# state alone is refused, naming what to give.
for old_w, new_w in ((2, 3), (3, 1)):
    k = rnd.randrange(2, 16 // old_w)  # inside every source's first source-epoch
    got, states = [], []
    for r in range(old_w):
        x = mixture(pack={"tokens": 16}, batch_size=10, rank=r, world_size=old_w)
        got += [next(x) for _ in range(k)]
        states.append(x.state_dict())
        x.close()
    for r in range(new_w):
        y = mixture(pack={"tokens": 16}, batch_size=10, rank=r, world_size=new_w,
                    pack_ahead=r % 2 * 3)
        y.load_state_dict(states)
        got += [next(y) for _ in range(60)]
        y.close()
    t.check(unpack_mixture(got, old_w + new_w - 2),
            "packed mixture %d -> %d ranks after %d steps: every document of each source once "
            "over the old and the new ranks (but for the padding of a split)" % (old_w, new_w, k))
    if old_w == 2:
        w = mixture(pack={"tokens": 16}, batch_size=10, rank=0, world_size=new_w)
        refused("packed mixture onto another world size from one state", dscache.BadState,
                ["saved on 2 ranks resumes on 3", "every old rank"],
                lambda: (w.load_state_dict(states[0]), w)[1])
        w.close()
        # Old ranks' states of different steps, or not in rank order: refused.
        x = mixture(pack={"tokens": 16}, batch_size=10, rank=1, world_size=2)
        next(x)
        late = x.state_dict()
        x.close()
        for bad, needles in (([states[0], late], ["different steps"]),
                             ([states[1], states[0]], ["rank 1 of 2", "rank order"])):
            w = mixture(pack={"tokens": 16}, batch_size=10, rank=0, world_size=3)
            refused("packed mixture: " + needles[0], dscache.BadState, needles,
                    lambda: (w.load_state_dict(bad), w)[1])
            w.close()
# Rows that mix sources (pack_sources="mixed"): the composed documents (the loader over the
# mixture, 256 documents a step) packed in their order. Rebuilt from (segment_source,
# segment_index, segment_start), the documents are the unpacked mixture's, in the same order;
# some row holds two sources; a resume continues byte for byte; another world size is refused.
def mixed(**kw):
    return mixture(pack={"tokens": 16}, batch_size=10, pack_sources="mixed", **kw)


ref = mixture(batch_size=256, fields=["tokens"])
want = []
for x in [next(ref) for _ in range(2)]:
    o = x["tokens_offsets"]
    want += [(int(s), int(i), x["tokens"][o[k]:o[k + 1]])
             for k, (s, i) in enumerate(zip(x["source"], x["__index__"]))]
ref.close()
m = mixed()
got, cur, ok, two = [], None, True, False
for x in [next(m) for _ in range(20)]:
    flat, cu = x["tokens"].reshape(-1), x["cu_seqlens"]
    rows = {}
    for g in range(len(x["segment_index"])):
        s, d, st = (int(x["segment_source"][g]), int(x["segment_index"][g]),
                    int(x["segment_start"][g]))
        if d < 0:
            ok = ok and s == -1
            continue
        rows.setdefault(int(cu[g]) // 16, set()).add(s)
        if st == 0:
            cur = [s, d, []]
            got.append(cur)
        ok = ok and cur is not None and cur[:2] == [s, d]
        if cur is not None:
            cur[2].append(flat[cu[g]:cu[g + 1]])
    two = two or any(len(v) > 1 for v in rows.values())
got = got[:-1]  # the last may continue in the next batch
t.check(ok and len(got) > 100 and all(
    (a, b) == (c, e) and np.array_equal(np.concatenate(parts), w)
    for (a, b, parts), (c, e, w) in zip(got, want)),
    "pack_sources='mixed': the mixture's documents in its order (%d documents)" % len(got))
t.check(two, "pack_sources='mixed': a row holds documents of two sources")
st = m.state_dict()
cont = [next(m) for _ in range(5)]
m.close()
m = mixed()
m.load_state_dict(st)
again = [next(m) for _ in range(5)]
t.check(all(set(x) == set(y) and all(np.array_equal(x[k], y[k]) for k in x)
            for x, y in zip(cont, again)), "pack_sources='mixed': a resume continues byte for byte")
t.check(m.stats()["pack"]["efficiency"] >= 0.99, "pack_sources='mixed': stats()['pack']")
m.close()


# pack_sources="mixed" onto another world size, from every old rank's state: over the mixture's
# epoch (exhausted="stop": every source in its first source-epoch), the documents packed by the
# old ranks before the stop and the new ranks after it: each whole and in order, none twice
# (but for the padding of an uneven split), and all of them (an epoch of 256-document steps
# covers these small sources).
def mixed_epoch(batches, docs):
    ok, cur = True, {}
    for x in batches:
        flat, cu = x["tokens"].reshape(-1), x["cu_seqlens"]
        for g in range(len(x["segment_index"])):
            s, d, st = (int(x["segment_source"][g]), int(x["segment_index"][g]),
                        int(x["segment_start"][g]))
            if d < 0:
                continue
            runs = docs.setdefault((s, d), [])
            if st == 0:
                runs.append([])
            ok = ok and bool(runs) and sum(len(v) for v in runs[-1]) == st
            if runs:
                runs[-1].append(flat[cu[g]:cu[g + 1]])
    return ok


for old_w, new_w in ((2, 3), (3, 2)):
    k = rnd.randrange(1, 4)
    docs, states, ok = {}, [], True
    for r in range(old_w):
        x = mixed(rank=r, world_size=old_w, exhausted="stop")
        ok = mixed_epoch([next(x) for _ in range(k)], docs) and ok
        states.append(x.state_dict())
        x.close()
    for r in range(new_w):
        y = mixed(rank=r, world_size=new_w, exhausted="stop", pack_ahead=r % 2 * 3)
        y.load_state_dict(states)
        ok = mixed_epoch(list(y), docs) and ok
        y.close()
    whole = all(np.array_equal(np.concatenate(run), toks(NAMES[s], d))
                for (s, d), runs in docs.items() for run in runs)
    twice = sum(len(runs) - 1 for runs in docs.values())
    full = [all((s, i) in docs for i in range(SIZES[NAMES[s]])) for s in range(3)]
    t.check(ok and whole and twice <= old_w + new_w - 2 and all(full),
            "pack_sources='mixed' %d -> %d ranks after %d batches: documents whole and in order "
            "(%s), %d twice, every document of a source %s" % (old_w, new_w, k, ok and whole,
                                                              twice, full))
w = mixed(rank=0, world_size=2)
refused("pack_sources='mixed' onto another world size from one state", dscache.BadState,
        ["world size"], lambda: (w.load_state_dict(st), w)[1])
w.close()
refused("pack_sources unknown", dscache.InvalidOption, ["pack_sources", "'rows'"],
        lambda: mixture(pack={"tokens": 16}, pack_sources="rows"))
w = mixture(pack={"tokens": 16}, batch_size=10)
w.load_state_dict(saved)
t.check(int(w.step) == 60, "packed mixture: a list of one rank's state resumes on one rank")
w.close()

refused("weight 0", dscache.InvalidOption, ["books", "weight"],
        lambda: dscache.Source("books", weight=0))
refused("weight < 0", dscache.InvalidOption, ["web", "weight"],
        lambda: dscache.Source("web", weight=-1))
refused("repeat 0", dscache.InvalidOption, ["web", "repeat"],
        lambda: dscache.Source("web", repeat=0))
refused("repeat < 0", dscache.InvalidOption, ["web", "repeat"],
        lambda: dscache.Source("web", repeat=-1.5))
refused("no sources", dscache.InvalidOption, ["sources"], lambda: mixture(sources=[]))
refused("unreachable source", dscache.Unavailable, ["'code'"],
        lambda: mixture(sources=[dscache.Source("web"), dscache.Source("code",
                                                                       servers="127.0.0.1:1")],
                        timeout_ms=300))
refused("unknown source", dscache.NotFound, ["'nosuch'"],
        lambda: mixture(sources=[dscache.Source("web"), dscache.Source("nosuch")]))
refused("needed field missing", dscache.InvalidOption, ["'web'", "'lang'"],
        lambda: mixture(fields=["lang"], sources=[dscache.Source("code", servers=code_addr),
                                                  dscache.Source("web")]))
refused("a source with none of the fields the others have", dscache.InvalidOption,
        ["'langonly'", "no field in common"],
        lambda: mixture(fields=None, sources=[dscache.Source("web"), dscache.Source("langonly")]))
refused("a source with none of the needed fields", dscache.InvalidOption,
        ["'langonly'", "'tokens'"],
        lambda: mixture(sources=[dscache.Source("web"), dscache.Source("langonly")]))
refused("field definitions differ", dscache.InvalidOption, ["'tokens'", "'odd'", "int64",
                                                            "int32"],
        lambda: mixture(sources=[dscache.Source("web"), dscache.Source("odd")]))
refused("a per-field output option with sources", dscache.InvalidOption, ["max_len", "sources"],
        lambda: mixture(max_len=8))
refused("pack length under 1", dscache.InvalidOption, ["pack", "tokens"],
        lambda: mixture(pack={"tokens": 0}))
refused("pack on a fixed-shape field", dscache.InvalidOption, ["'id'", "fixed-shape"],
        lambda: mixture(pack={"id": 16}))
m = mixture()
next(m)
st = m.stats()
t.check(st["starving_source"] in (None, "web", "code", "books") and st["step"] == 1 and
        abs(sum(v["stall_share"] for v in st["sources"].values()) - (1.0 if st["stall_seconds"]
                                                                      > 0 else 0.0)) < 1e-9,
        "stats(): the verdict names a source (or None without stall): %r"
        % st["starving_source"])
m.close()
other = mixture(sources=sources([0.5, 0.3, 0.2]))
try:
    other.load_state_dict(state)
    t.check(False, "state of another mixture: refused")
except dscache.BadState as e:
    t.check("weights" in str(e), "state of another mixture: " + str(e))
plain = dscache.Loader(servers=addr, dataset="web", batch_size=4)
try:
    other.load_state_dict(plain.state_dict())
    t.check(False, "single-dataset state into a mixture: refused")
except dscache.BadState as e:
    t.check("mixture" in str(e), "single-dataset state into a mixture: " + str(e))
other.close()
plain.close()

# Batches are arrays over the loader's batch slots (no copy): one the caller keeps is never
# overwritten by later ones, and stays valid after close().
m = mixture(prefetch=2)
kept = next(m)
copy = {k: np.array(v, copy=True) for k, v in kept.items()}
for _ in range(12):
    next(m)
m.close()
t.check(all(np.array_equal(kept[k], copy[k]) for k in copy),
        "a kept batch is unchanged after 12 more batches and close()")
sys.exit(t.done())
