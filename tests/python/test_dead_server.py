"""A server killed mid-epoch: the loader's error names the server, what happened and the fixes
(replicas, fallback_path), not only "connection refused"; with fallback_path set the job goes on
from the files, byte for byte, and the switch is said once (a RuntimeWarning and a WARN line),
not once per chunk or per epoch."""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(__file__))
import dsc_testenv  # noqa: E402

dsc_testenv.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

c = dsc_testenv.Checks()
env = dsc_testenv.Env()
n = 6000
x = (np.arange(n * 64, dtype=np.uint32) * 2654435761 % 1000003).astype(np.float32).reshape(n, 64)
y = np.arange(n, dtype=np.int64)
path = env.ingest_npy("dead", {"x": x, "y": y})

# 1. No replica, no fallback: the error names the server and the ways out.
proc, addr = env.start_server(path)
loader = dscache.Loader(servers=addr, dataset="dead", batch_size=64, prefetch=2, shuffle=False,
                        inflight_bytes=64 << 10, cache_bytes=1 << 20)
it = iter(loader)
next(it)
proc.kill()
proc.wait()
err = None
try:
    for _ in it:
        pass
except dscache.Error as e:
    err = e
c.check(isinstance(err, dscache.Unavailable), "a dead server raises Unavailable: %r" % err)
text = str(err)
print("dead server: %s" % text)
for part in (addr, "replicas", "fallback_path", "dead"):
    c.check(part in text, "the error names %r: %s" % (part, text))
loader.close()

# 2. With fallback_path: every batch, the files' bytes, and one warning over two epochs.
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    loader = dscache.Loader(servers=addr, dataset="dead", batch_size=64, shuffle=False,
                            fallback_path=path)
    seen = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for b in loader:
            seen.append((np.array(b["y"]), np.array(b["x"])))
    loader.close()
said = [str(m.message) for m in w if "fallback_path" in str(m.message)]
c.check(len(said) == 1, "the switch to fallback_path is said once: %s" % said)
if said:
    print("fallback: %s" % said[0])
    c.check(path in said[0], "the warning names the fallback directory: %s" % said[0])
ys = np.concatenate([s[0] for s in seen])
c.check(len(ys) == 2 * n and set(ys.tolist()) == set(range(n)), "two whole epochs from files")
c.check(all(np.array_equal(s[1], x[s[0]]) for s in seen), "the files' bytes, sample for sample")
sys.exit(c.done())
