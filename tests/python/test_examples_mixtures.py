"""The mixture examples under examples/ run as written against a dscached serving the datasets
they name (three token sources, one on its own server; two image-caption sources)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
rng = np.random.default_rng(3)
dirs = {}
for name, n in (("web", 300), ("code", 150), ("books", 60)):
    d = dirs[name] = os.path.join(env.dir, name)
    with dscache.Writer(d, name=name, fields={"input_ids": "i32[]"}, chunk_bytes=65536) as w:
        for i in range(n):
            k = int(np.clip(np.exp(rng.normal(6.0, 1.0)), 1, 8192))
            w.write({"input_ids": rng.integers(0, 50000, k, dtype=np.int32)})
for name, n, extra in (("pairs_web", 90, False), ("pairs_curated", 30, True)):
    fields = {"image": "u8[3,8,8]", "caption": "i32[]"}
    if extra:
        fields["score"] = "f32"
    d = dirs[name] = os.path.join(env.dir, name)
    with dscache.Writer(d, name=name, fields=fields) as w:
        for i in range(n):
            rec = {"image": rng.integers(0, 255, (3, 8, 8), dtype=np.uint8),
                   "caption": rng.integers(0, 1000, 1 + i % 9, dtype=np.int32)}
            if extra:
                rec["score"] = 0.5
            w.write(rec)
_, addr = env.start_server(dirs["web"], dirs["books"], dirs["pairs_web"], dirs["pairs_curated"])
_, code_addr = env.start_server(dirs["code"])
examples = os.path.join(te.SRC, "examples")
run_env = dict(os.environ, DSCACHE_SERVERS=addr, DSCACHE_CODE_SERVERS=code_addr,
               PYTHONPATH=os.path.join(te.SRC, "client", "python"))
for script in ("blended_pretraining.py", "multimodal_two_sources.py"):
    r = subprocess.run([sys.executable, os.path.join(examples, script)], env=run_env,
                       capture_output=True, text=True, timeout=240)
    sys.stdout.write(r.stdout)
    t.check(r.returncode == 0 and r.stdout.rstrip().endswith("ok"),
            "%s runs as written (rc %d): %s" % (script, r.returncode, r.stderr[-2000:]))
sys.exit(t.done())
