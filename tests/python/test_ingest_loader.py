"""End to end for dscache ingest webdataset|megatron|mds (issue 18): sources written by
tests/integration/ingest_sources.py are ingested with the CLI, served by a real dscached and
iterated with dscache.Loader; every sample's values equal the source's, variable-length fields
both as values + offsets and padded (pad=, with _lengths)."""
import inspect
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
sys.path.insert(0, os.path.join(te.SRC, "tests", "integration"))
import numpy as np  # noqa: E402
import dscache  # noqa: E402
import ingest_sources as S  # noqa: E402

if "pad" not in inspect.signature(dscache.Loader.__init__).parameters:
    te.skip("this dscache.Loader has no variable-length fields")

env = te.Env()
t = te.Checks()
cli = os.path.join(te.BIN, "dscache")


def ingest(form, out, *args):
    r = subprocess.run([cli, "ingest", form, "-o", os.path.join(env.dir, out), "--name", out,
                        "--chunk-size", "8K", "--shard-size", "64K"] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(r.stdout, file=sys.stderr)
        raise SystemExit("dscache ingest %s failed" % form)
    return os.path.join(env.dir, out)


tars, wds = S.write_wds(os.path.join(env.dir, "wds-src"), tars=2, samples=60)
docs = S.megatron_docs(45)
S.write_megatron(os.path.join(env.dir, "meg-src"), docs=45)
mds = S.write_mds(os.path.join(env.dir, "mds-src"), samples=40)
dirs = [ingest("webdataset", "wds", "--field", "jpg:image", "--field", "cls:label",
               "--field", "npy:feat", *tars),
        ingest("megatron", "meg", os.path.join(env.dir, "meg-src")),
        ingest("mds", "mds", os.path.join(env.dir, "mds-src"))]
_, addr = env.start_server(*dirs)


def np_(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def each(dataset, **kw):
    """(index, batch, k) for every sample of one epoch."""
    ld = dscache.Loader(servers=addr, dataset=dataset, batch_size=7, seed=3, indices=True,
                        shuffle_window=16, **kw)
    for b in ld:
        for k, i in enumerate(np_(b["__index__"])):
            yield int(i), b, k


def var(b, name, k):
    off = np_(b[name + "_offsets"])
    return np_(b[name])[off[k]:off[k + 1]]


# ---- webdataset: bytes, i64 label, f32[?,4] ---------------------------------------------------
seen, ok = set(), True
for i, b, k in each("wds"):
    seen.add(i)
    s = wds[i]
    ok = ok and var(b, "image", k).tobytes() == s["jpg"]
    ok = ok and int(np_(b["label"])[k]) == s["cls"]
    ok = ok and np.array_equal(var(b, "feat", k), s["npy"])
t.check(ok and seen == set(range(60)), "webdataset: every sample once, values + offsets equal")
ok = True
for i, b, k in each("wds", pad={"feat": -1.0, "image": 0}):
    n = int(np_(b["feat_lengths"])[k])
    feat = np_(b["feat"])[k]
    ok = ok and n == len(wds[i]["npy"]) and np.array_equal(feat[:n], wds[i]["npy"])
    ok = ok and bool(np.all(feat[n:] == -1.0))
    m = int(np_(b["image_lengths"])[k])
    ok = ok and np_(b["image"])[k][:m].tobytes() == wds[i]["jpg"]
t.check(ok, "webdataset: padded values and lengths equal")

# ---- megatron: one sample per document --------------------------------------------------------
seen, ok = set(), True
for i, b, k in each("meg"):
    seen.add(i)
    ok = ok and np.array_equal(var(b, "tokens", k), docs[i])
t.check(ok and seen == set(range(45)), "megatron: every document once, tokens equal")
ok = True
for i, b, k in each("meg", pad={"tokens": 0}):
    n = int(np_(b["tokens_lengths"])[k])
    ok = ok and n == len(docs[i]) and np.array_equal(np_(b["tokens"])[k][:n], docs[i])
t.check(ok, "megatron: padded tokens equal")

# ---- mds: scalars, fixed ndarray, bytes -------------------------------------------------------
seen, ok = set(), True
for i, b, k in each("mds"):
    seen.add(i)
    s = mds[i]
    ok = ok and var(b, "text", k).tobytes() == s["text"]
    ok = ok and var(b, "image", k).tobytes() == s["image"]
    ok = ok and int(np_(b["label"])[k]) == int(s["label"])
    ok = ok and np.array_equal(np_(b["vec"])[k], s["vec"])
    ok = ok and np_(b["score"])[k].tobytes() == s["score"].tobytes()
    ok = ok and int(np_(b["count"])[k]) == int(s["count"])
    ok = ok and np.array_equal(var(b, "feat", k), s["feat"])
    ok = ok and np.array_equal(var(b, "any", k), s["any"])
t.check(ok and seen == set(range(40)), "mds: every sample once, columns equal")
sys.exit(t.done())
