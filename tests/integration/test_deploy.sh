#!/usr/bin/env bash
# The Kubernetes manifests render (kustomize base and every overlay), and every dscached flag
# they pass is one that dscached documents in --help, so the pods would start.
set -euo pipefail
src=${DSC_SRC:?}
if ! command -v kubectl >/dev/null 2>&1; then
    echo "SKIP: kubectl is not installed (it renders the kustomize manifests)"
    exit 77
fi
help=$("$DSC_BIN/dscached" --help)
fail=0
for dir in base overlays/dev overlays/production; do
    out=$(kubectl kustomize "$src/deploy/k8s/$dir") || { echo "FAIL: $dir does not render"; exit 1; }
    grep -q "kind: StatefulSet" <<<"$out" || { echo "FAIL: $dir has no StatefulSet"; fail=1; }
    grep -q "clusterIP: None" <<<"$out" || { echo "FAIL: $dir has no headless Service"; fail=1; }
    flags=$(grep -oE -- '- --[a-z-]+' <<<"$out" | sed 's/^- //' | sort -u)
    [ -n "$flags" ] || { echo "FAIL: $dir passes no flags"; fail=1; }
    for flag in $flags; do
        if ! grep -qE -- "(^|[[:space:]])$flag([[:space:]=]|$)" <<<"$help"; then
            echo "FAIL: $dir passes $flag, which dscached --help does not document"
            fail=1
        fi
    done
    echo "$dir: renders; flags: $(echo $flags)"
done
exit $fail
