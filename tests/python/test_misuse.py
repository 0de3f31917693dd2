"""The mistakes PyTorch users make get named, from Python (issue 23): each case is an exception
or a warning that names the cause and the fix, never silence.
  - rank=0 / world_size=1 given where torch.distributed (a one-process gloo group of world 2 is
    not possible, so: an initialised group of world 1 against world_size=2) or RANK / WORLD_SIZE
    say otherwise: InvalidOption naming both values; ignore_rank_env=True allows it;
  - an epoch with no batch (batch_size=1000 on 300 samples with drop_last): InvalidOption with
    the numbers; a dropped last batch: one RuntimeWarning with the samples never seen, over
    several epochs;
  - DataLoader(dscache.torch.Dataset(...)) with DataLoader's default batch_size=1 (or any
    batch_size): ValueError when iterated; dscache.torch.DataLoader gives [B, ...] batches;
  - a damaged chunk with no other source: Corrupt naming server, dataset, shard file, chunk and
    the fixes, with DSC_ECORRUPT once;
  - the HTTP port given as data port: Unavailable naming the data port; a server without a
    port: InvalidOption naming HOST:PORT."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402

env = te.Env()
t = te.Checks()
N = 300
arrays = {"x": np.arange(N * 4, dtype=np.float32).reshape(N, 4),
          "y": np.arange(N, dtype=np.int64)}
data = env.ingest_npy("mis", arrays, chunk_size="1K")
_, addr = env.start_server(data)
clean = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                      "DSCACHE_LOG", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")}


def py(code, extra=None):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(clean, **(extra or {})), timeout=120)
    if r.returncode != 0:
        print(r.stderr[-2000:], file=sys.stderr)
    return r


PRELUDE = """
import json, warnings, dscache
out = {}
def attempt(key, **kw):
    try:
        l = dscache.Loader(servers=%r, dataset="mis", **kw)
        out[key] = ["ok", l.rank, l.world_size, len(l)]
        l.close()
    except Exception as e:
        out[key] = [type(e).__name__, str(e)]
""" % addr

# ---- ranks against RANK / WORLD_SIZE ------------------------------------------------------
r = py(PRELUDE + """
attempt("rank0", rank=0)
attempt("world1", world_size=1)
attempt("both", rank=0, world_size=1)
attempt("override", rank=0, world_size=1, ignore_rank_env=True)
attempt("env")
attempt("same", rank=1, world_size=2)
print(json.dumps(out))
""", {"RANK": "1", "WORLD_SIZE": "2"})
t.check(r.returncode == 0, "rank checks ran")
if r.returncode == 0:
    o = json.loads(r.stdout.strip().splitlines()[-1])
    for key, want in (("rank0", ["rank=0", "RANK=1"]), ("world1", ["world_size=1", "WORLD_SIZE=2"]),
                      ("both", ["world_size=1", "rank=0", "RANK=1", "WORLD_SIZE=2"])):
        e = o[key]
        t.check(e[0] == "InvalidOption" and all(w in e[1] for w in want)
                and "ignore_rank_env=True" in e[1] and e[1].count("DSC_EINVAL") == 1,
                "%s under RANK=1 WORLD_SIZE=2: InvalidOption naming %s and the override: %s"
                % (key, want, e))
    print("rank=0 under RANK=1: %s" % o["rank0"][1])
    t.check(o["override"][:3] == ["ok", 0, 1], "ignore_rank_env=True reads as told: %s"
            % o["override"])
    t.check(o["env"][:3] == ["ok", 1, 2] and o["same"][:3] == ["ok", 1, 2],
            "unset or equal values are fine: %s %s" % (o["env"], o["same"]))

# ---- ranks against an initialised torch.distributed -----------------------------------------
try:
    import torch  # noqa: F401
    import torch.distributed as dist
    have_torch = True
    have_gloo = dist.is_available() and dist.is_gloo_available()
except ImportError:
    have_torch = have_gloo = False
if have_gloo:
    store = os.path.join(env.dir, "gloo-store")
    r = py("""
import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://%s", rank=0, world_size=1)
""" % store + PRELUDE + """
attempt("dist", world_size=2, rank=1)
attempt("dist_override", world_size=2, rank=1, ignore_rank_env=True)
print(json.dumps(out))
dist.destroy_process_group()
""", {"GLOO_SOCKET_IFNAME": "lo"})
    t.check(r.returncode == 0, "torch.distributed checks ran")
    if r.returncode == 0:
        o = json.loads(r.stdout.strip().splitlines()[-1])
        e = o["dist"]
        t.check(e[0] == "InvalidOption" and "torch.distributed" in e[1] and "world_size=2" in e[1]
                and "get_world_size()=1" in e[1], "against torch.distributed: %s" % e)
        t.check(o["dist_override"][:3] == ["ok", 1, 2], "override: %s" % o["dist_override"])
else:
    print("torch with gloo not available: the torch.distributed check is skipped")

# ---- epochs with no batch, the dropped last batch -----------------------------------------
r = py(PRELUDE + """
attempt("empty", batch_size=1000, drop_last=True)
attempt("empty2", batch_size=200, drop_last=True, rank=1, world_size=2)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    l = dscache.Loader(servers=%r, dataset="mis", batch_size=128, drop_last=True)
    n = 0
    for epoch in range(3):
        l.set_epoch(epoch)
        n += sum(len(b["y"]) for b in l)
    l.close()
out["warned"] = [str(x.message) for x in w if "drop_last" in str(x.message)]
out["warned_at"] = [[x.filename, x.lineno] for x in w if "drop_last" in str(x.message)]
out["seen"] = n
print(json.dumps(out))
""" % addr)
t.check(r.returncode == 0, "epoch checks ran")
if r.returncode == 0:
    o = json.loads(r.stdout.strip().splitlines()[-1])
    e = o["empty"]
    t.check(e[0] == "InvalidOption" and "300 samples" in e[1] and "300 per rank" in e[1]
            and "batch_size 1000" in e[1] and "drop_last" in e[1],
            "no batch per epoch: InvalidOption with the numbers: %s" % e)
    print("batch_size=1000 on 300 samples, drop_last: %s" % e[1])
    t.check(o["empty2"][0] == "InvalidOption" and "150 per rank" in o["empty2"][1],
            "per rank: %s" % o["empty2"])
    t.check(len(o["warned"]) == 1 and "44 samples per epoch are never seen" in o["warned"][0],
            "a dropped last batch: one warning over 3 epochs: %s" % o["warned"])
    t.check(o["seen"] == 3 * 256, "drop_last epochs read 256 samples each: %d" % o["seen"])
    # The warning points at the caller's line (the Loader(...) call), not at dscache's own.
    t.check(len(o["warned_at"]) == 1 and "/dscache/" not in o["warned_at"][0][0],
            "the drop_last warning points at the caller's line: %s" % o["warned_at"])

# ---- dscache.torch and DataLoader's default batch_size ------------------------------------
if not have_torch:
    print("torch not available: the dscache.torch checks are skipped")
else:
    r = py("""
import json, torch, dscache.torch
ds = dscache.torch.Dataset(servers=%r, dataset="mis", batch_size=64)
out = {}
for key, make in (("default", lambda: torch.utils.data.DataLoader(ds)),
                  ("bs4", lambda: torch.utils.data.DataLoader(ds, batch_size=4)),
                  ("helper", lambda: dscache.torch.DataLoader(ds)),
                  ("none", lambda: torch.utils.data.DataLoader(ds, batch_size=None))):
    try:
        out[key] = ["ok", list(next(iter(make()))["x"].shape)]
    except Exception as e:
        out[key] = [type(e).__name__, str(e)]
try:
    dscache.torch.DataLoader(ds, batch_size=8)
    out["helper_bs"] = "accepted"
except ValueError as e:
    out["helper_bs"] = str(e)
print(json.dumps(out))
""" % addr)
    t.check(r.returncode == 0, "DataLoader checks ran")
    if r.returncode == 0:
        o = json.loads(r.stdout.strip().splitlines()[-1])
        for key, bs in (("default", "batch_size=1"), ("bs4", "batch_size=4")):
            e = o[key]
            t.check(e[0] == "ValueError" and bs in e[1] and "batch_size=None" in e[1]
                    and "dscache.torch.DataLoader" in e[1],
                    "DataLoader(ds%s): ValueError naming the fix: %s"
                    % ("" if key == "default" else ", batch_size=4", e))
        print("DataLoader(ds): %s" % o["default"][1])
        t.check(o["helper"] == ["ok", [64, 4]] and o["none"] == ["ok", [64, 4]],
                "dscache.torch.DataLoader and batch_size=None: [64, 4]: %s %s"
                % (o["helper"], o["none"]))
        t.check("batch_size must be None" in o["helper_bs"], "the helper refuses batch_size=8: %s"
                % o["helper_bs"])

# ---- server addresses -----------------------------------------------------------------------
hport_file = os.path.join(env.dir, "http.port")
port_file = os.path.join(env.dir, "data.port")
proc = subprocess.Popen([os.path.join(te.BIN, "dscached"), "--listen", "127.0.0.1:0", "--http",
                         "127.0.0.1:0", "--port-file", port_file, "--http-port-file", hport_file,
                         "--log-level", "error", "--threads", "1", "--data", data])
env.procs.append(proc)
for _ in range(200):
    if all(os.path.exists(f) and os.path.getsize(f) > 0 for f in (port_file, hport_file)):
        break
    time.sleep(0.05)
haddr = "127.0.0.1:" + open(hport_file).read().strip()
daddr = "127.0.0.1:" + open(port_file).read().strip()
r = py("""
import json, dscache
out = {}
for key, servers in (("http", %r), ("noport", "127.0.0.1")):
    try:
        dscache.Loader(servers=servers, dataset="mis")
        out[key] = ["ok"]
    except Exception as e:
        out[key] = [type(e).__name__, str(e)]
print(json.dumps(out))
""" % haddr)
t.check(r.returncode == 0, "address checks ran")
if r.returncode == 0:
    o = json.loads(r.stdout.strip().splitlines()[-1])
    t.check(o["http"][0] == "Unavailable" and "HTTP port" in o["http"][1]
            and "the data port is %s" % daddr in o["http"][1],
            "the HTTP port: Unavailable naming the data port %s: %s" % (daddr, o["http"]))
    t.check(o["noport"][0] == "InvalidOption" and "HOST:PORT" in o["noport"][1],
            "no port: InvalidOption naming HOST:PORT: %s" % o["noport"])
    print("HTTP port: %s" % o["http"][1])

# ---- a damaged chunk --------------------------------------------------------------------------
damaged = os.path.join(env.dir, "mis-damaged")
subprocess.run(["cp", "-r", data, damaged], check=True)
subprocess.run([os.path.join(te.BIN, "shard_damage"), "flip", damaged, "0"], check=True,
               stdout=subprocess.DEVNULL)
_, baddr = env.start_server(damaged)
r = py("""
import json, dscache
try:
    l = dscache.Loader(servers=%r, dataset="mis", batch_size=50)
    for b in l:
        pass
    out = ["ok"]
except Exception as e:
    out = [type(e).__name__, str(e)]
print(json.dumps(out))
""" % baddr)
t.check(r.returncode == 0, "damaged chunk check ran")
if r.returncode == 0:
    e = json.loads(r.stdout.strip().splitlines()[-1])
    msg = e[1] if len(e) > 1 else ""
    print("damaged chunk: %s" % msg)
    t.check(e[0] == "Corrupt", "a damaged chunk raises Corrupt: %s" % e)
    for want in ("server " + baddr, "dataset mis", "shard 0 (shard-00000.dsc)", "chunk ",
                 "fallback_path", "--replicas", "re-ingest", "dscache inspect"):
        t.check(want in msg, "the error names %r: %s" % (want, msg))
    t.check(msg.count("DSC_E") == 1, "each code once: %s" % msg)
sys.exit(t.done())
