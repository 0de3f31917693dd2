#!/usr/bin/env bash
# Variable-length fields through the loader (issue 18): a format-version-2 dataset (tok i32[],
# mel f32[?,80], img u8[3,4,4], label i64; lz4 and raw shards) served by a real dscached, then
# read from the fallback files alone: values + offsets and padded (with max_len) byte-equal to
# the written values, each sample once per epoch at 2 ranks, a resume, and a batch over its
# byte budget failing with an error naming dataset, sample and option; a chunk with a bad layout
# read from another copy, or failing clearly (loader_var_check.c).
set -euo pipefail
source "$(dirname "$0")/loader_env.sh"
[ -x "$DSC_BIN/loader_var_check" ] || { echo "SKIP: loader_var_check not built"; exit 77; }

"$DSC_BIN/loader_var_check" gen "$work/varz" varz 200 lz4
"$DSC_BIN/loader_var_check" gen "$work/varr" varr 131 raw
"$DSC_BIN/loader_var_check" write "$work/varw" varw 300 lz4 # the public writer, dsc_writer_*
start_server --data "$work/varz" --data "$work/varr" --data "$work/varw"
"$DSC_BIN/loader_var_check" check --dataset varz --samples 200 --servers "127.0.0.1:$port"
"$DSC_BIN/loader_var_check" check --dataset varr --samples 131 --servers "127.0.0.1:$port"
"$DSC_BIN/loader_var_check" check --dataset varw --samples 300 --servers "127.0.0.1:$port"
# The files source: no server at all.
"$DSC_BIN/loader_var_check" check --dataset varz --samples 200 --fallback "$work/varz"
# A chunk whose offsets are out of order but whose checksums hold: the layout check catches it;
# read from the fallback files' good copy, else a clear DSC_ECORRUPT naming the chunk.
"$DSC_BIN/loader_var_check" gen "$work/bad/varb" varb 100 lz4 bad
"$DSC_BIN/loader_var_check" gen "$work/good/varb" varb 100 lz4
start_server --data "$work/bad/varb"
"$DSC_BIN/loader_var_check" corrupt --dataset varb --samples 100 --servers "127.0.0.1:$port" \
    --fallback "$work/good/varb"
"$DSC_BIN/loader_var_check" corrupt --dataset varb --samples 100 --fallback "$work/bad/varb"
# RDMA READ through the test-only fake verbs library: the same decode and collation.
fake=${DSC_FAKEVERBS_LIB:-}
if [ -n "$fake" ] && [ -f "$fake" ]; then
    export DSC_IBVERBS_LIB=$fake
    unset DSC_FAKEVERBS_FAULTS DSC_FAKEVERBS_DEVICES DSCACHE_RDMA_SLAB_BYTES
    start_server --data "$work/varz" --rdma required
    DSCACHE_TRANSPORT=rdma "$DSC_BIN/loader_var_check" check --dataset varz --samples 200 \
        --servers "127.0.0.1:$port" --expect-rdma 1
else
    echo "SKIP (part): libfakeverbs not built: the RDMA run is left out"
fi
echo ok
