"""The transport keyword: "tcp", "auto" and "rdma" through the test-only fake verbs library
(DSC_IBVERBS_LIB, set before the library loads): batches equal the arrays over RDMA READ, the
stats say which transport carried the bytes, a bad value is a ValueError, and "rdma" without a
device fails with the loader's clear error."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
fake = os.environ.get("DSC_FAKEVERBS_LIB", "")
if not fake or not os.path.exists(fake):
    te.skip("libfakeverbs not built (no rdma-core headers at build time)")
os.environ["DSC_IBVERBS_LIB"] = fake
os.environ.pop("DSCACHE_TRANSPORT", None)
os.environ.pop("DSC_FAKEVERBS_DEVICES", None)
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
N = 900
rng = np.random.default_rng(5)
x = rng.standard_normal((N, 8)).astype(np.float32)
ds_dir = env.ingest_npy("rdmads", {"x": x, "i": np.arange(N, dtype=np.int64)[:, None]})
_, addr = env.start_server(ds_dir)


def epoch(transport):
    loader = dscache.Loader(servers=addr, dataset="rdmads", batch_size=32, seed=1,
                            transport=transport)
    seen = []
    for b in loader:
        idx = b["i"][:, 0]
        t.check(np.array_equal(b["x"], x[idx]), "%s: batch bytes equal the array" % transport)
        seen.extend(idx.tolist())
    t.check(sorted(seen) == list(range(N)), "%s: every sample once" % transport)
    stats = loader.stats()
    loader.close()
    return stats


s = epoch("rdma")
print("rdma:", {k: s[k] for k in ("rdma_connections", "tcp_connections", "rdma_bytes",
                                   "wire_bytes", "rdma_fallbacks")})
t.check(s["rdma_bytes"] > 0 and s["rdma_bytes"] == s["wire_bytes"], "rdma: every byte by READ")
t.check(s["rdma_connections"] > 0 and s["tcp_connections"] == 0, "rdma: connections by RDMA")
s = epoch("tcp")
t.check(s["rdma_bytes"] == 0 and s["rdma_connections"] == 0, "tcp: no RDMA")
s = epoch("auto")
t.check(s["rdma_bytes"] > 0, "auto with a device: RDMA")
try:
    dscache.Loader(servers=addr, dataset="rdmads", transport="infiniband")
    t.check(False, "a bad transport is refused")
except ValueError as e:
    print("bad transport:", e)

# No device: "rdma" fails at create with the reason; "auto" still works (a fresh process, so
# that the library sees the environment).
code = """
import dscache, sys
try:
    dscache.Loader(servers=sys.argv[1], dataset="rdmads", transport="rdma")
    print("created")
except dscache.Error as e:
    print("error:", e)
l = dscache.Loader(servers=sys.argv[1], dataset="rdmads", transport="auto")
print("auto batches:", sum(1 for _ in l), "rdma_bytes:", l.stats()["rdma_bytes"])
"""
out = subprocess.run([sys.executable, "-c", code, addr], capture_output=True, text=True,
                     env=dict(os.environ, DSC_FAKEVERBS_DEVICES="0",
                              PYTHONPATH=os.path.join(te.SRC, "client", "python")))
print(out.stdout, out.stderr)
t.check("error:" in out.stdout and "RDMA is unavailable here" in out.stdout,
        "rdma without a device: a clear error")
t.check("auto batches: 29 rdma_bytes: 0" in out.stdout, "auto without a device: TCP")
sys.exit(t.done())
