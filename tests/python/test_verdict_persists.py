"""A loader's verdict outlives its steps: read 12 s after the last step (past the verdict's
5-10 s window, which then holds no step), stats() still gives the verdict of the steps the job
made, with its figures and their age, not "unknown: ... measured so far"; before any step it is
"unknown" as before."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import dsc_testenv  # noqa: E402

dsc_testenv.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

c = dsc_testenv.Checks()
env = dsc_testenv.Env()
n = 20000
path = env.ingest_npy("verd", {"x": np.ones((n, 64), dtype=np.float32),
                               "y": np.arange(n, dtype=np.int64)})
_, addr = env.start_server(path)

loader = dscache.Loader(servers=addr, dataset="verd", batch_size=32)
early = loader.stats()
c.check(early["bottleneck"] == "unknown", "before any step: unknown (%s)" % early["bottleneck"])

# Steps with 4 ms of "compute" each, for at least 1.5 s of steps (the verdict needs 0.2 s).
start, steps = time.monotonic(), 0
for epoch in range(100):
    loader.set_epoch(epoch)
    for b in loader:
        time.sleep(0.004)
        steps += 1
        if time.monotonic() - start > 1.5:
            break
    if time.monotonic() - start > 1.5:
        break
during = loader.stats()
print("while stepping (%d steps): %s: %s" % (steps, during["bottleneck"], during["evidence"]))
c.check(during["bottleneck"] != "unknown", "a verdict after 1.5 s of steps: %s" % during)

time.sleep(12)
after = loader.stats()
print("12 s after the last step: %s: %s" % (after["bottleneck"], after["evidence"]))
# The verdict may have been made again over the window's last steps after `during` (a REPORT
# rotates the window): it is the run's, whatever it names, never "unknown".
c.check(after["bottleneck"] != "unknown",
        "the verdict stands after the steps stop: %s, then %s (%s)" % (
            during["bottleneck"], after["bottleneck"], after["evidence"]))
c.check("the last steps measured" in after["evidence"],
        "its evidence says it is the last steps' and how old: %s" % after["evidence"])
c.check(after["suggestion"] != "wait for a few steps", "its suggestion is the run's")
loader.close()
sys.exit(c.done())
