/* One RDMA device opened for dscache's transport: the port and GID it uses, a protection domain,
 * and the RC queue-pair state changes both sides need (RESET -> INIT -> RTR -> RTS). Shared by
 * the server (server/rdma.c) and the loader (client/lib/source_rdma.c); part of dsc_sys. */
#ifndef DSC_SYS_RDMA_LINK_H
#define DSC_SYS_RDMA_LINK_H

#include "protocol.h"
#include "verbs.h"

#include <stddef.h>
#include <stdint.h>

#define DSC_RDMA_ENV_DEVICE "DSC_RDMA_DEVICE"       /* device name to use (default: the first) */
#define DSC_RDMA_ENV_GID_INDEX "DSC_RDMA_GID_INDEX" /* GID index (default: first routable) */
#define DSC_RDMA_QP_TIMEOUT 14                      /* about 67 ms per try, as 3FS/Mooncake */
#define DSC_RDMA_QP_RETRY 7

typedef struct dsc_rdma_dev {
    dsc_verbs_t v;
#if DSC_HAVE_VERBS_H
    struct ibv_context *ctx;
    struct ibv_pd *pd;
#endif
    uint8_t port;
    uint8_t link_layer; /* DSC_RDMA_LINK_IB or DSC_RDMA_LINK_ETHERNET */
    uint8_t mtu;        /* active MTU, enum ibv_mtu */
    uint8_t max_rd_atomic;
    int gid_index; /* -1 on InfiniBand */
    uint8_t gid[DSC_RDMA_GID_SIZE];
    uint16_t lid;
    uint64_t max_mr_size;
    char name[64];
} dsc_rdma_dev_t;

/* Loads the verbs library, opens the device ($DSC_RDMA_DEVICE or the first), its first ACTIVE
 * port, a routable GID on RoCE (never link-local; $DSC_RDMA_GID_INDEX overrides) or the LID on
 * InfiniBand, and allocates a protection domain. Returns 0, or DSC_ENOTSUP / DSC_ENOENT /
 * DSC_EPROTO / DSC_EUNAVAIL (no usable device or port) with one sentence in reason. */
int dsc_rdma_dev_open(dsc_rdma_dev_t *dev, char *reason, size_t reason_cap);
/* Frees the PD and closes the device (every QP, CQ and MR on it must be gone). Takes NULL. */
void dsc_rdma_dev_close(dsc_rdma_dev_t *dev);

#if DSC_HAVE_VERBS_H
/* An RC QP on dev's PD with cq for both queues, moved to INIT with `access` (remote access
 * flags). Returns the QP or NULL (errno set). */
struct ibv_qp *dsc_rdma_qp_create(dsc_rdma_dev_t *dev, struct ibv_cq *cq, uint32_t max_send_wr,
                                  int access);
/* This side's description for RDMA_CONNECT (version, link layer, port, MTU, lid, gid, device). */
void dsc_rdma_qp_describe(const dsc_rdma_dev_t *dev, const struct ibv_qp *qp, uint32_t psn,
                          uint8_t rd_atomic, dsc_rdma_qp_info_t *out);
/* INIT -> RTR towards `remote` with the agreed path MTU and READs accepted. Returns 0 or -errno. */
int dsc_rdma_qp_rtr(dsc_rdma_dev_t *dev, struct ibv_qp *qp, const dsc_rdma_qp_info_t *remote,
                    uint8_t path_mtu, uint8_t max_dest_rd_atomic);
/* RTR -> RTS with this side's PSN and READs outstanding. Returns 0 or -errno. */
int dsc_rdma_qp_rts(dsc_rdma_dev_t *dev, struct ibv_qp *qp, uint32_t psn, uint8_t rd_atomic);
/* Moves the QP to ERR (no more READs served or issued) and destroys it. Takes NULL. */
void dsc_rdma_qp_fence(dsc_rdma_dev_t *dev, struct ibv_qp *qp);
#endif

/* A random 24-bit PSN. */
uint32_t dsc_rdma_random_psn(void);

#endif
