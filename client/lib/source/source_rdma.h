/* Data source "rdma" (source_rdma.c): chunks by RDMA READ out of a dscached arena, TCP as the
 * control channel and as the per-connection fallback; and the loader's RDMA device. */
#ifndef DSC_SOURCE_RDMA_H
#define DSC_SOURCE_RDMA_H

#include "source.h"

extern const dsc_source_ops_t dsc__source_rdma;
extern const dsc_source_ops_t dsc__source_tcp; /* the fallback (source_tcp.c) */

/* The loader's RDMA device and its one slab for transport auto/rdma: `slab_bytes` (rounded up to
 * 2 MiB; see dsc__rdma_slab_bytes) mapped with hugetlb pages where there are (else normal pages
 * with MADV_HUGEPAGE) and registered once, LOCAL_WRITE, before any connection; its size, pages
 * and registration time are logged (INFO). Every connection's READs land in regions of it.
 * TCP: *out NULL, 0. Auto without a usable device: *out NULL, 0, one INFO line with the reason;
 * with a device but a slab that cannot be registered (RLIMIT_MEMLOCK, CAP_IPC_LOCK): *out NULL,
 * 0, one WARN line naming the fix. RDMA without either: an ERROR line and DSC_EUNAVAIL. Calls
 * ibv_fork_init() first unless the kernel makes it unneeded. */
int dsc__rdma_client_open(dsc_transport_t transport, uint64_t slab_bytes, const dsc_logger_t *log,
                          dsc_rdma_client_t **out);
/* After every connection (every QP) is closed: deregisters and unmaps the slab. NULL is a
 * no-op. */
void dsc__rdma_client_close(dsc_rdma_client_t *rdma);
/* The slab a loader needs: about 2 x inflight_bytes (the loader-wide budget of bytes in flight),
 * at least twice the largest request (DSC_SOURCE_MAX_MERGE chunks of the manifest's largest
 * chunk, with lz4's worst-case growth), at least 4 MiB. */
uint64_t dsc__rdma_slab_bytes(const dsc_manifest_t *manifest, uint64_t inflight_bytes);
/* Parses "tcp" | "rdma" | "auto"; returns 0 or DSC_EINVAL. */
int dsc__transport_parse(const char *text, dsc_transport_t *out);

/* One RDMA_CONNECT to addr and a READ of its probe region, checked against its checksum (what
 * `dscache doctor --server` runs), authenticating with cred (NULL: anonymous). Returns 0 (device:
 * the local device used and its GID choice, "fakeverbs0 (GID index 2 ...)"), or an error with
 * one sentence in why: DSC_EUNAUTH when the server refused the credential or wants one. */
int dsc__rdma_probe(const char *addr, uint32_t timeout_ms, const dsc_credential_t *cred, char *why,
                    size_t why_cap, char *device, size_t device_cap);

#endif
