"""deploy/grafana/dscache-dashboard.json: valid JSON, a Grafana dashboard whose queries name only
metrics the programs export. The exported names come from a live dscached's /metrics (with a
job reporting to it) and a loader's metrics text, not from a list kept here."""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsc_testenv as te  # noqa: E402

te.require_tools()
import numpy as np  # noqa: E402
import dscache  # noqa: E402

env = te.Env()
t = te.Checks()
path = os.path.join(te.SRC, "deploy", "grafana", "dscache-dashboard.json")
with open(path) as f:
    dash = json.load(f)  # a JSON error fails the test here

ds_dir = env.ingest_npy("dashds", {"x": np.arange(4096 * 4, dtype=np.float32).reshape(4096, 4)})
port_file = os.path.join(env.dir, "port")
http_file = os.path.join(env.dir, "hport")
server = subprocess.Popen([os.path.join(te.BIN, "dscached"), "--listen", "127.0.0.1:0",
                           "--http", "127.0.0.1:0", "--port-file", port_file,
                           "--http-port-file", http_file, "--log-level", "error", "--threads",
                           "1", "--data", ds_dir])
env.procs.append(server)
for _ in range(200):
    if all(os.path.exists(p) and os.path.getsize(p) > 0 for p in (port_file, http_file)):
        break
    time.sleep(0.05)
addr = "127.0.0.1:" + open(port_file).read().strip()
http = "127.0.0.1:" + open(http_file).read().strip()

# Eight connections on a one-chunk dataset: most I/O threads never get work, and the job must
# report all the same (any connected thread sends it), and go on reporting while idle.
loader = dscache.Loader(servers=addr, dataset="dashds", batch_size=64, job="dashboard-check",
                        report_seconds=0.2, connections=8)
for _ in loader:
    pass
time.sleep(0.5)
for _ in loader:  # a second epoch: reports go out while it runs
    pass
loader_text = loader.metrics_text()


def accepted():
    text = urllib.request.urlopen("http://%s/metrics" % http, timeout=10).read().decode()
    return tuple(int(re.search(r"^%s (\d+)" % name, text, re.M).group(1))
                 for name in ("dscache_connections_total", "dscache_open_connections"))


before = accepted()
time.sleep(1.5)  # the trainer "computes": no fetch, reports (every 0.2 s) go on
server_text = urllib.request.urlopen("http://%s/metrics" % http, timeout=10).read().decode()
after = accepted()
loader.close()


def exported(text):
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
            if m.group(2) == "histogram":
                names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, 1)[0])
    return names


names = exported(server_text) | exported(loader_text)
t.check("dscache_job_stall_fraction" in names, "the server exports the job stall")
t.check('job="dashboard-check"' in server_text, "the reporting job is in /metrics")
ages = [float(m) for m in re.findall(
    r'^dscache_job_report_age_seconds\{job="dashboard-check"[^}]*\} (\S+)$', server_text, re.M)]
t.check(ages and ages[0] < 1.0,
        "an idle loader keeps reporting (report age %s s after 1.5 s idle)" % ages)
t.check(after == before, "reporting while idle neither opens nor drops a connection "
        "(accepted, open: %s then %s)" % (before, after))
t.check("dscache_loader_stall_fraction" in names, "the loader exports its stall")


def queries(node):
    """Every PromQL string of the dashboard: targets' expr and template variable queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, str) and "dscache_" in value:
                yield value
            else:
                yield from queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from queries(item)


def unknown_metrics(exprs, known):
    return sorted({m for e in exprs for m in re.findall(r"\bdscache_[A-Za-z0-9_:]*", e)} - known)


exprs = list(queries(dash))
t.check(len(exprs) >= 10, "the dashboard has queries (%d)" % len(exprs))
missing = unknown_metrics(exprs, names)
t.check(not missing, "queries name only exported metrics; not exported: %s" % missing)
# The check itself catches a name nobody exports.
t.check(unknown_metrics(["rate(dscache_no_such_metric_total[1m])"], names) ==
        ["dscache_no_such_metric_total"], "the name check finds an unexported metric")
used = {m for e in exprs for m in re.findall(r"\bdscache_[A-Za-z0-9_:]*", e)}
for need in ("dscache_job_stall_fraction", "dscache_bytes_served_total", "dscache_hits_total",
             "dscache_misses_total", "dscache_dataset_resident_fraction",
             "dscache_loader_stall_fraction"):
    t.check(need in used, "the dashboard shows %s" % need)
# Grafana's shape: panels with ids, targets with refIds, the data source as a variable.
ids = [p.get("id") for p in dash.get("panels", [])]
t.check(len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids), "unique panel ids")
for p in dash["panels"]:
    for target in p.get("targets", []):
        t.check("refId" in target and target.get("datasource", {}).get("uid") == "${datasource}",
                "panel %r: target with refId and the datasource variable" % p.get("title"))
t.check(any(v.get("type") == "datasource" for v in dash["templating"]["list"]),
        "a datasource variable")
sys.exit(t.done())
