"""Rank and world size: processes started with only RANK / WORLD_SIZE set read disjoint parts
that together cover the dataset; explicit arguments that disagree with the environment are
refused naming both (InvalidOption), and win with ignore_rank_env=True; plain DDP with two gloo
processes on loopback takes its ranks from torch.distributed and trains in step."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402

env = te.Env()
t = te.Checks()
N = 700
rng = np.random.default_rng(3)
x = rng.standard_normal((N, 4)).astype(np.float32)
arrays = {"x": x, "y": (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32))[:, None]}
ds_dir = env.ingest_npy("rds", arrays)
_, addr = env.start_server(ds_dir)
clean = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}

# ---- two processes with only RANK / WORLD_SIZE ----------------------------------------------
READER = """
import json, dscache
l = dscache.Loader(servers=%r, dataset="rds", batch_size=32, seed=7, indices=True)
idx = [i for b in l for i in b["__index__"].tolist()]
print(json.dumps({"rank": l.rank, "world": l.world_size, "source": l.rank_source, "idx": idx}))
""" % addr
procs = [subprocess.Popen([sys.executable, "-c", READER], stdout=subprocess.PIPE, text=True,
                          env=dict(clean, RANK=str(r), WORLD_SIZE="2")) for r in range(2)]
outs = []
for p in procs:
    out, _ = p.communicate(timeout=120)
    t.check(p.returncode == 0, "RANK/WORLD_SIZE reader exited %d" % p.returncode)
    outs.append(json.loads(out.strip().splitlines()[-1]) if p.returncode == 0 else None)
if all(outs):
    for r, o in enumerate(outs):
        t.check((o["rank"], o["world"], o["source"]) == (r, 2, "environment"),
                "rank %d/2 from the environment: %s" % (r, (o["rank"], o["world"], o["source"])))
    a, b = set(outs[0]["idx"]), set(outs[1]["idx"])
    t.check(len(a) == len(outs[0]["idx"]) and len(b) == len(outs[1]["idx"]), "no repeats")
    t.check(not (a & b), "ranks see disjoint samples (%d shared)" % len(a & b))
    t.check(a | b == set(range(N)), "together every sample (%d of %d)" % (len(a | b), N))
    t.check(abs(len(a) - len(b)) <= 32, "balanced: %d / %d" % (len(a), len(b)))

# ---- resolution rules, world_size=1 under WORLD_SIZE=2 refused -------------------------------
RULES = """
import json, dscache
out = {}
out["explicit"] = dscache.resolve_rank(0, 3, ignore_rank_env=True)[:2]
out["world_only"] = dscache.resolve_rank(None, 2)[:2]
try:
    dscache.Loader(servers=%r, dataset="rds", world_size=1)
    out["refused"] = "accepted"
except dscache.InvalidOption as e:
    out["refused"] = str(e)
l = dscache.Loader(servers=%r, dataset="rds", world_size=1, ignore_rank_env=True)
out["one"] = [l.rank, l.world_size]
l.close()
try:
    dscache.resolve_rank(5, 2)
    out["bad"] = "accepted"
except ValueError as e:
    out["bad"] = str(e)
out["cuda"] = [dscache._parse_device("cuda"), dscache._parse_device("cuda:3")]
print(json.dumps(out))
""" % (addr, addr)
r = subprocess.run([sys.executable, "-c", RULES], capture_output=True, text=True,
                   env=dict(clean, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1"))
t.check(r.returncode == 0, "rules run: %s" % r.stderr[-400:])
if r.returncode == 0:
    o = json.loads(r.stdout.strip().splitlines()[-1])
    t.check(o["explicit"] == [0, 3], "ignore_rank_env: explicit rank/world_size win: %s"
            % o["explicit"])
    t.check(o["world_only"] == [1, 2], "world_size given = environment's: RANK kept")
    t.check("world_size=1" in o["refused"] and "WORLD_SIZE=2" in o["refused"],
            "world_size=1 under WORLD_SIZE=2 refused naming both: %s" % o["refused"])
    t.check(o["one"] == [0, 1], "world_size=1 with ignore_rank_env is obeyed: %s" % o["one"])
    t.check(o["cuda"] == [1, 3], "device 'cuda' is cuda:LOCAL_RANK, 'cuda:3' is 3: %s"
            % o["cuda"])
    t.check("rank" in o["bad"] and "accepted" != o["bad"], "rank 5 of 2 refused: %s" % o["bad"])
r = subprocess.run([sys.executable, "-c", "import dscache; print(dscache.resolve_rank())"],
                   capture_output=True, text=True, env=clean)
t.check(r.stdout.strip() == "(0, 1, 'default')", "nothing set: 0/1: %s" % r.stdout.strip())

# ---- plain DDP, two gloo processes on loopback ------------------------------------------------
try:
    import torch  # noqa: F401
    import torch.distributed as dist
    have_gloo = dist.is_available() and dist.is_gloo_available()
except ImportError:
    have_gloo = False
if not have_gloo:
    print("torch with gloo not available: DDP part skipped")
    sys.exit(t.done())
DDP = """
import json, sys, torch, torch.distributed as dist
import dscache.torch
rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
torch.manual_seed(0)
ds = dscache.torch.Dataset(servers=%r, dataset="rds", batch_size=25, seed=3, indices=True,
                           drop_last=True)   # equal step counts on every rank, as DDP needs
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
dl = torch.utils.data.DataLoader(ds, batch_size=None)
idx, losses = [], []
for epoch in range(4):
    ds.set_epoch(epoch)
    for b in dl:
        if epoch == 0:
            idx += b["__index__"].tolist()
        loss = torch.nn.functional.mse_loss(model(b["x"]), b["y"])
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
w = [p.detach().flatten().tolist() for p in model.parameters()]
print(json.dumps({"rank": ds.rank, "world": ds.world_size, "source": ds.loader.rank_source,
                  "idx": idx, "first": losses[0], "last": losses[-1], "w": w,
                  "steps": len(losses)}))
dist.destroy_process_group()
""" % addr
store = tempfile.mktemp(prefix="dsc-ddp-", dir=env.dir)
ddp_env = dict(clean, GLOO_SOCKET_IFNAME="lo")
procs = [subprocess.Popen([sys.executable, "-c", DDP, str(r), store], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=ddp_env) for r in range(2)]
outs = []
for p in procs:
    try:
        out, err = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    t.check(p.returncode == 0, "DDP rank exited %s: %s" % (p.returncode, err[-600:]))
    outs.append(json.loads(out.strip().splitlines()[-1]) if p.returncode == 0 else None)
if all(outs):
    for r, o in enumerate(outs):
        t.check((o["rank"], o["world"], o["source"]) == (r, 2, "torch.distributed"),
                "DDP rank %d: %s" % (r, (o["rank"], o["world"], o["source"])))
    a, b = set(outs[0]["idx"]), set(outs[1]["idx"])
    t.check(a and b and not (a & b), "DDP ranks read disjoint samples (%d shared)" % len(a & b))
    t.check(outs[0]["steps"] == outs[1]["steps"], "same step count on both ranks")
    t.check(outs[0]["w"] == outs[1]["w"], "DDP kept the replicas identical")
    print("DDP: %d steps per rank, loss %.3f -> %.3f" % (outs[0]["steps"], outs[0]["first"],
                                                         outs[0]["last"]))
    t.check(outs[0]["last"] < 0.2 * outs[0]["first"], "DDP model learns")
sys.exit(t.done())
