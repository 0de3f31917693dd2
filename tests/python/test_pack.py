"""Packing in dscache.Loader (pack={field: length}) over a real dscached: documents of a
long-tailed length distribution packed into rows, unpacked again through segment_index /
segment_start: every document's tokens exactly once per epoch, on 1 and 2 ranks, efficiency
>= 99% (stats()["pack"]); the layout arrays; stopping mid-epoch (inside a split document) and
resuming in a new loader continues byte for byte, the next epoch too; pack_split=False cuts and
counts; every bad input gets its error naming the culprit."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
N = 400
rng = np.random.default_rng(11)
lengths = np.clip(np.exp(rng.normal(5.0, 1.1, N)), 1, 2048).astype(np.int64)


def doc(i):
    return (np.arange(int(lengths[i]), dtype=np.int64) + i * 10007).astype(np.int32)


ds_dir = os.path.join(env.dir, "docs")
with dscache.Writer(ds_dir, name="docs", fields={"input_ids": "i32[]", "label": "i64"},
                    chunk_bytes=16384) as w:
    for i in range(N):
        w.write({"input_ids": doc(i), "label": i})
_, addr = env.start_server(ds_dir)
L, ROWS = 512, 4


def loader(**kw):
    args = dict(servers=addr, dataset="docs", batch_size=ROWS, seed=3, shuffle_window=64,
                pack={"input_ids": L})
    args.update(kw)
    return dscache.Loader(**args)


def unpack(batches, what, check_layout=True):
    """{doc index: tokens seen, in order} from packed batches; checks the layout arrays."""
    seen = {}
    ok = True
    for b in batches:
        tok, pos, did = b["input_ids"], b["position_ids"], b["document_ids"]
        cu, si, ss = b["cu_seqlens"], b["segment_index"], b["segment_start"]
        flat = tok.reshape(-1)
        ok = ok and tok.shape[1] == L and tok.dtype == np.int32 and cu.dtype == np.int32
        ok = ok and cu[0] == 0 and cu[-1] == tok.size and len(cu) == len(si) + 1
        for s in range(len(si)):
            a, e = int(cu[s]), int(cu[s + 1])
            ok = ok and a // L == (e - 1) // L
            if check_layout:
                ok = ok and np.array_equal(pos.reshape(-1)[a:e], np.arange(e - a)
                                           if si[s] >= 0 else np.zeros(e - a))
                ok = ok and np.all(did.reshape(-1)[a:e] == (s if si[s] >= 0 else -1))
            if si[s] < 0:
                continue
            d = int(si[s])
            have = seen.setdefault(d, [])
            ok = ok and int(ss[s]) == sum(len(x) for x in have)
            have.append(flat[a:e].copy())
    t.check(ok, what + ": layout (cu_seqlens, position_ids, document_ids, segment starts)")
    return {d: np.concatenate(v) for d, v in seen.items()}


def check_once(seen, docs, what):
    ok = sorted(seen) == sorted(docs)
    for d in docs:
        ok = ok and d in seen and np.array_equal(seen[d], doc(d))
    t.check(ok, what + ": every document's tokens exactly once, in order")


# One rank, one epoch.
ld = loader()
try:
    len(ld)
    t.check(False, "len() of a packed loader raises TypeError")
except TypeError:
    pass
epoch0 = list(ld)
t.check(all(b["input_ids"].shape == (ROWS, L) for b in epoch0[:-1]), "batches are [rows, L]")
check_once(unpack(epoch0, "1 rank"), range(N), "1 rank")
ps = ld.stats()["pack"]
t.check(ps["documents"] == N and ps["tokens"] == int(lengths.sum()),
        "stats: documents %d (want %d), tokens %d (want %d)"
        % (ps["documents"], N, ps["tokens"], int(lengths.sum())))
t.check(ps["efficiency"] >= 0.99, "efficiency %.4f >= 0.99" % ps["efficiency"])
t.check(ps["split_documents"] > 0 and ps["cut_tokens"] == 0, "split documents, none cut")
print("1 rank: %d batches, efficiency %.4f, split documents %d"
      % (len(epoch0), ps["efficiency"], ps["split_documents"]))
epoch1 = list(ld)  # the next epoch: another order, every document again
check_once(unpack(epoch1, "epoch 1"), range(N), "epoch 1")
t.check(not np.array_equal(epoch0[0]["input_ids"], epoch1[0]["input_ids"]),
        "epoch 1 is in another order")
ld.close()
# The batches are views over the packer's buffers (no copy out of its ring), and a batch held
# is never overwritten: epoch 0's batches, held through epoch 1 and the loader's close, still
# hold every document once.
t.check(not any(b[k].flags.owndata for b in epoch0 for k in ("input_ids", "cu_seqlens")),
        "packed batches are views over the packer's buffers (no copy)")
check_once(unpack(epoch0, "held through epoch 1 and close"), range(N),
           "held through epoch 1 and close")

# Packed on the caller's thread (pack_ahead=0) and 5 ahead: the same batches.
for ahead in (0, 5):
    other = loader(pack_ahead=ahead)
    same = list(other)
    t.check(len(same) == len(epoch0) and all(all(np.array_equal(x[k], y[k]) for k in x)
                                            for x, y in zip(epoch0, same)),
            "pack_ahead=%d: the same batches" % ahead)
    other.close()

# Two ranks: each document once across them.
seen = {}
for rank in range(2):
    r = loader(rank=rank, world_size=2)
    part = unpack(list(r), "rank %d" % rank)
    t.check(not set(part) & set(seen), "ranks share no document")
    seen.update(part)
    r.close()
check_once(seen, range(N), "2 ranks")

# Stop mid-epoch inside a split document, resume in a new loader: byte for byte.
ref = loader()
batches = list(ref)
cut_at = next(k for k in range(1, len(batches)) if batches[k]["segment_start"][0] > 0)
ref.close()
a = loader(pack_ahead=0 if cut_at % 2 else 3)
for _ in range(cut_at):
    next(a)
state = a.state_dict()
rest_a = list(a) + list(a)[:3]
a.close()
b = loader()
b.load_state_dict(state)
rest_b = list(b) + list(b)[:3]
want = batches[cut_at:]
t.check(len(rest_b) == len(rest_a) and all(
    all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(rest_a, rest_b)),
    "resume: the rest of the epoch and the next one equal the uninterrupted loader's")
t.check(all(np.array_equal(x["input_ids"], y["input_ids"]) for x, y in zip(want, rest_b)),
        "resume at batch %d (inside document %d) continues byte for byte"
        % (cut_at, int(batches[cut_at]["segment_index"][0])))
b.close()

# Cut: a document that does not fit its row starts the next; longer ones are cut at L.
c = loader(pack_split=False)
seen = unpack(list(c), "cut")
ok = all(np.array_equal(seen[d], doc(d)[:L]) for d in range(N))
cs = c.stats()["pack"]
t.check(ok and cs["cut_tokens"] == int(np.maximum(lengths - L, 0).sum()) and
        cs["cut_documents"] == int((lengths > L).sum()),
        "cut: first L tokens of each document once, the rest counted (%d tokens)"
        % cs["cut_tokens"])
c.close()


def refused(what, exc, needle, **kw):
    try:
        loader(**kw).close()
    except exc as e:
        t.check(needle in str(e), "%s: %r names %r" % (what, str(e), needle))
        return
    t.check(False, what + ": refused")


refused("pack on a fixed field", dscache.InvalidOption, "fixed-shape", pack={"label": 8})
refused("pack on a missing field", dscache.InvalidOption, "no field 'nope'", pack={"nope": 8})
refused("pack length 0", dscache.InvalidOption, "length", pack={"input_ids": 0})
refused("pack length -1", dscache.InvalidOption, "length", pack={"input_ids": -1})
refused("pack on a padded field", dscache.InvalidOption, "padded", pad={"input_ids": 0})
refused("two pack fields", TypeError, "one field", pack={"input_ids": 8, "label": 8})
refused("pack_rows 0", dscache.InvalidOption, "pack_rows", pack_rows=0)
refused("pack_ahead -1", dscache.InvalidOption, "pack_ahead", pack_ahead=-1)
refused("pack_ahead 65", dscache.InvalidOption, "ahead 65", pack_ahead=65)

# States of another kind or other pack settings are refused, not resumed into another stream.
plain = dscache.Loader(servers=addr, dataset="docs", batch_size=ROWS, seed=3, shuffle_window=64)
p = loader()
for x, y, what in ((p, plain.state_dict(), "unpacked state into a packed loader"),
                   (plain, state, "packed state into an unpacked loader")):
    try:
        x.load_state_dict(y)
        t.check(False, what + ": refused")
    except dscache.BadState as e:
        t.check("packed" in str(e), what + ": " + str(e))
other = loader(pack={"input_ids": L * 2})
try:
    other.load_state_dict(state)
    t.check(False, "state of another length: refused")
except dscache.BadState as e:
    t.check("length" in str(e) and str(L) in str(e), "state of another length: " + str(e))
two = loader(rank=1, world_size=2)
try:  # one rank's packed position says nothing of the others': refused, not re-split
    two.load_state_dict(state)
    t.check(False, "packed state onto another world size: refused")
except dscache.BadState as e:
    t.check("world size" in str(e) and "not 2" in str(e),
            "packed state onto another world size: " + str(e))
for x in (plain, p, other, two):
    x.close()

# A packed stream onto another world size: every old rank's state resumes each new rank, and
# every document's tokens are packed exactly once over the old and the new ranks.
for old_w, new_w in ((2, 4), (4, 2)):
    k = int(rng.integers(1, 6))
    got, states = [], []
    for r in range(old_w):
        x = loader(rank=r, world_size=old_w)
        got += [next(x) for _ in range(k)]
        states.append(x.state_dict())
        x.close()
    for r in range(new_w):
        y = loader(rank=r, world_size=new_w, pack_ahead=r % 2 * 3)
        y.load_state_dict(states)
        got += list(y)
        y.close()
    what = "%d -> %d ranks after %d packed batches" % (old_w, new_w, k)
    check_once(unpack(got, what), range(N), what)
sys.exit(t.done())
