"""dscache.Loader with device="cuda:0": batches arrive on the GPU and equal the source. Skips
(exit 77) where torch has no CUDA device; tests/gpu/run_gpu_checks.sh runs it on a GPU host."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
try:
    import torch
except ImportError:
    te.skip("torch is not installed")
if not torch.cuda.is_available():
    te.skip("no CUDA device visible to torch (torch.cuda.is_available() is False)")
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(1)
N = 2000
arrays = {"x": rng.standard_normal((N, 16, 16)).astype(np.float32),
          "y": rng.integers(0, 1000, (N,), dtype=np.int64)}
_, addr = env.start_server(env.ingest_npy("cu", arrays))
loader = dscache.Loader(servers=addr, dataset="cu", batch_size=128, device="cuda:0",
                        output="torch", indices=True)
stream = torch.cuda.Stream()
loader.set_stream(stream)
seen = 0
with torch.cuda.stream(stream):
    for batch in loader:
        idx = batch["__index__"]
        x = batch["x"]
        t.check(x.is_cuda and x.device.index == 0, "batch on cuda:0")
        t.check(torch.equal(x.cpu(), torch.from_numpy(arrays["x"][idx])), "device bytes equal")
        t.check(torch.equal(batch["y"].cpu(), torch.from_numpy(arrays["y"][idx])), "labels")
        seen += len(idx)
t.check(seen == N, "one epoch")
st = loader.stats()
# Copies are timed when their slot is filled again: an epoch of 16 batches refills slots.
t.check(st["h2d_bytes"] > 0 and st["h2d_seconds"] > 0, "host-to-device copies timed")
t.check(st["h2d_bytes"] / st["h2d_seconds"] < 1e12, "a plausible copy bandwidth")
print("h2d: %d bytes in %.6f s" % (st["h2d_bytes"], st["h2d_seconds"]))
loader.close()
sys.exit(t.done())
