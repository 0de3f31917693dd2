#!/usr/bin/env bash
# The Kubernetes manifests: the base, every overlay, the optional components (over the
# production overlay), the ingest Job and the trainer example render (kubectl kustomize); every
# object passes its Kubernetes OpenAPI schema and every pod template Pod Security "restricted"
# (deploy/k8s/check/check.mjs, offline); every dscached flag they pass is one that dscached
# documents in --help. The ipc-lock component must be flagged (the checker can fail), and the
# membership Service must publish not-ready addresses (readiness means warm).
set -euo pipefail
src=${DSC_SRC:?}
k8s=$src/deploy/k8s
for tool in kubectl node /usr/bin/python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is not installed (deploy/local/setup.sh)"; exit 77; }
done
if [ ! -d "$k8s/check/node_modules/kubernetes-models" ]; then
    echo "SKIP: $k8s/check/node_modules is missing (deploy/local/setup.sh runs npm ci there)"
    exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
help=$("$DSC_BIN/dscached" --help)
fail=0
to_json() { /usr/bin/python3 -c 'import sys, yaml, json; json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)'; }

# Each component over the production overlay, in a kustomization of its own.
# (kustomize takes relative paths only.)
rel() { /usr/bin/python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$1" "$2"; }
for comp in servicemonitor ipc-lock; do
    mkdir -p "$work/with-$comp"
    cat >"$work/with-$comp/kustomization.yaml" <<K
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(rel "$k8s/overlays/production" "$work/with-$comp")
components:
  - $(rel "$k8s/components/$comp" "$work/with-$comp")
K
done

check() { # name dir expect(pass|fail)
    local name=$1 dir=$2 expect=$3 out
    out=$(kubectl kustomize --load-restrictor LoadRestrictionsNone "$dir") ||
        { echo "FAIL: $name does not render"; fail=1; return; }
    to_json <<<"$out" >"$work/$name.json"
    local result rc=0
    result=$(node "$k8s/check/check.mjs" "$work/$name.json") || rc=$?
    if [ "$expect" = pass ] && [ $rc -ne 0 ]; then
        echo "FAIL: $name:"; echo "$result"; fail=1
    elif [ "$expect" = fail ] && [ $rc -ne 1 ]; then
        echo "FAIL: $name should be flagged by the Pod Security check (rc $rc):"; echo "$result"; fail=1
    else
        echo "$name: $(tail -n1 <<<"$result")"
    fi
    if grep -q "kind: StatefulSet" <<<"$out"; then
        local flags
        flags=$(grep -oE -- '- --[a-z-]+' <<<"$out" | sed 's/^- //' | sort -u)
        [ -n "$flags" ] || { echo "FAIL: $name passes no flags"; fail=1; }
        for flag in $flags; do
            grep -qE -- "(^|[[:space:]])$flag([[:space:]=]|$)" <<<"$help" ||
                { echo "FAIL: $name passes $flag, which dscached --help does not document"; fail=1; }
        done
        # Membership: the peers Service publishes not-ready addresses and is the one --members names.
        /usr/bin/python3 - "$work/$name.json" <<'PY' || fail=1
import json, sys
objs = json.load(open(sys.argv[1]))
svc = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
sts = [o for o in objs if o["kind"] == "StatefulSet"][0]
args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
members = [a for a in args if a.startswith("--members=dns:")]
bad = []
if not members:
    bad.append("no --members=dns:")
else:
    name = members[0][len("--members=dns:"):].split(".")[0]
    if name not in svc or not svc[name]["spec"].get("publishNotReadyAddresses"):
        bad.append("the member Service %s does not publish not-ready addresses" % name)
    if sts["spec"]["serviceName"] != name:
        bad.append("serviceName is not the member Service")
clients = [n for n, s in svc.items() if not s["spec"].get("publishNotReadyAddresses") and
           "data" in [p.get("name") for p in s["spec"]["ports"]]]
if not clients:
    bad.append("no client Service (ready pods only)")
grace = sts["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
drain = [int(a.split("=")[1]) for a in args if a.startswith("--drain-seconds=")]
if not drain or grace <= drain[0]:
    bad.append("terminationGracePeriodSeconds %s is not above --drain-seconds %s" % (grace, drain))
kinds = {o["kind"] for o in objs}
for k in ("PodDisruptionBudget", "NetworkPolicy", "PersistentVolumeClaim"):
    if k not in kinds:
        bad.append("no " + k)
for b in bad:
    print("FAIL: %s: %s" % (sys.argv[1].rsplit("/", 1)[-1], b))
sys.exit(1 if bad else 0)
PY
    fi
}
check base "$k8s/base" pass
check dev "$k8s/overlays/dev" pass
check production "$k8s/overlays/production" pass
check production+servicemonitor "$work/with-servicemonitor" pass
check production+ipc-lock "$work/with-ipc-lock" fail
check rdma "$k8s/overlays/rdma" fail
check ingest-job "$k8s/jobs/ingest" pass
check trainer-example "$k8s/examples/trainer" pass
exit $fail
