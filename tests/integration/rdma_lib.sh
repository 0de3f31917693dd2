# Sourced after server_lib.sh by the RDMA tests that run through the test-only fake verbs
# library: skips (77, with the reason) without rdma_check or libfakeverbs, loads the fake
# library in place of libibverbs, and clears every knob a test sets for itself.
CHECK=$DSC_BIN/rdma_check
[ -x "$CHECK" ] || { echo "SKIP: $CHECK not built"; exit 77; }
fake=${DSC_FAKEVERBS_LIB:-}
if [ -z "$fake" ] || [ ! -f "$fake" ]; then
    echo "SKIP: libfakeverbs not built (no rdma-core headers at build time)"
    exit 77
fi
export DSC_IBVERBS_LIB=$fake
unset DSC_FAKEVERBS_FAULTS DSC_FAKEVERBS_DEVICES DSC_FAKEVERBS_GID_LOOPBACK \
    DSC_FAKEVERBS_PORT_CTL DSC_FAKEVERBS_STATS DSC_FAKEVERBS_MEMLOCK DSC_RDMA_GID_INDEX \
    DSCACHE_TRANSPORT DSCACHE_TOKEN_FILE DSCACHE_RDMA_SLAB_BYTES
