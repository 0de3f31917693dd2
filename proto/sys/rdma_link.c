/* RDMA device and RC queue pair set-up shared by the server and the loader (rdma_link.h). */
#include "rdma_link.h"
#include "dscache_base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

uint32_t dsc_rdma_random_psn(void) {
    uint32_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
        v = (uint32_t)rand();
    return v & DSC_RDMA_MAX_QPN;
}

#if !DSC_HAVE_VERBS_H

int dsc_rdma_dev_open(dsc_rdma_dev_t *dev, char *reason, size_t reason_cap) {
    memset(dev, 0, sizeof *dev);
    return dsc_verbs_open(&dev->v, reason, reason_cap);
}

void dsc_rdma_dev_close(dsc_rdma_dev_t *dev) {
    (void)dev;
}

#else

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return *end == '\0' && v >= 0 && v < 256 ? (int)v : dflt;
}

/* The first routable GID of the port (or $DSC_RDMA_GID_INDEX); -1 when none. */
static int pick_gid(dsc_rdma_dev_t *dev, int table_len) {
    int forced = env_int(DSC_RDMA_ENV_GID_INDEX, -1);
    for (int i = 0; i < table_len && i < 256; i++) {
        if (forced >= 0 && i != forced)
            continue;
        union ibv_gid gid;
        if (dev->v.query_gid(dev->ctx, dev->port, i, &gid) != 0)
            continue;
        if (dsc_verbs_gid_unusable(gid.raw))
            continue;
        memcpy(dev->gid, gid.raw, sizeof dev->gid);
        return i;
    }
    return -1;
}

int dsc_rdma_dev_open(dsc_rdma_dev_t *dev, char *reason, size_t reason_cap) {
    memset(dev, 0, sizeof *dev);
    dev->gid_index = -1;
    char scratch[8];
    if (reason == NULL) {
        reason = scratch;
        reason_cap = sizeof scratch;
    }
    reason[0] = '\0';
    int rc = dsc_verbs_open(&dev->v, reason, reason_cap);
    if (rc < 0)
        return rc;
    int n = 0;
    struct ibv_device **list = dev->v.get_device_list(&n);
    if (list == NULL || n == 0) {
        if (list)
            dev->v.free_device_list(list);
        snprintf(reason, reason_cap,
                 "no RDMA device (the kernel lists none: /sys/class/infiniband is empty or "
                 "absent; in a container, pass /dev/infiniband through a device plugin)");
        dsc_verbs_close(&dev->v);
        return DSC_EUNAVAIL;
    }
    const char *want = getenv(DSC_RDMA_ENV_DEVICE);
    struct ibv_device *pick = NULL;
    for (int i = 0; i < n && pick == NULL; i++)
        if (want == NULL || *want == '\0' || strcmp(dev->v.get_device_name(list[i]), want) == 0)
            pick = list[i];
    if (pick == NULL) {
        snprintf(reason, reason_cap, "%s=%s names no RDMA device", DSC_RDMA_ENV_DEVICE, want);
        dev->v.free_device_list(list);
        dsc_verbs_close(&dev->v);
        return DSC_EUNAVAIL;
    }
    snprintf(dev->name, sizeof dev->name, "%s", dev->v.get_device_name(pick));
    dev->ctx = dev->v.open_device(pick);
    dev->v.free_device_list(list);
    if (dev->ctx == NULL) {
        snprintf(reason, reason_cap, "cannot open RDMA device %s: %s", dev->name, strerror(errno));
        dsc_verbs_close(&dev->v);
        return DSC_EUNAVAIL;
    }
    struct ibv_device_attr da;
    memset(&da, 0, sizeof da);
    if (dev->v.query_device(dev->ctx, &da) != 0) {
        snprintf(reason, reason_cap, "cannot query RDMA device %s", dev->name);
        goto fail;
    }
    dev->max_mr_size = da.max_mr_size;
    int rd = da.max_qp_rd_atom > 0 ? da.max_qp_rd_atom : 1;
    dev->max_rd_atomic = (uint8_t)(rd > 16 ? 16 : rd);
    for (int p = 1; p <= da.phys_port_cnt && dev->port == 0; p++) {
        struct ibv_port_attr pa;
        memset(&pa, 0, sizeof pa);
        if (dev->v.query_port(dev->ctx, (uint8_t)p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE)
            continue;
        dev->port = (uint8_t)p;
        dev->mtu = (uint8_t)pa.active_mtu;
        dev->link_layer =
            pa.link_layer == IBV_LINK_LAYER_ETHERNET ? DSC_RDMA_LINK_ETHERNET : DSC_RDMA_LINK_IB;
        dev->lid = pa.lid;
        if (dev->link_layer == DSC_RDMA_LINK_ETHERNET) {
            dev->gid_index = pick_gid(dev, pa.gid_tbl_len);
            if (dev->gid_index < 0) {
                snprintf(reason, reason_cap,
                         "RDMA device %s port %d has no routable RoCE v2 GID (link-local only): "
                         "give the RDMA netdev an address on the TCP network",
                         dev->name, p);
                goto fail;
            }
        }
    }
    if (dev->port == 0) {
        snprintf(reason, reason_cap, "RDMA device %s has no ACTIVE port (see 'dscache doctor')",
                 dev->name);
        goto fail;
    }
    dev->pd = dev->v.alloc_pd(dev->ctx);
    if (dev->pd == NULL) {
        snprintf(reason, reason_cap, "cannot allocate a protection domain on %s", dev->name);
        goto fail;
    }
    return 0;
fail:
    dev->v.close_device(dev->ctx);
    dev->ctx = NULL;
    dsc_verbs_close(&dev->v);
    return DSC_EUNAVAIL;
}

void dsc_rdma_dev_close(dsc_rdma_dev_t *dev) {
    if (dev == NULL || dev->ctx == NULL)
        return;
    if (dev->pd)
        dev->v.dealloc_pd(dev->pd);
    dev->v.close_device(dev->ctx);
    dev->ctx = NULL;
    dev->pd = NULL;
    dsc_verbs_close(&dev->v);
}

struct ibv_qp *dsc_rdma_qp_create(dsc_rdma_dev_t *dev, struct ibv_cq *cq, uint32_t max_send_wr,
                                  int access) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = max_send_wr;
    ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    struct ibv_qp *qp = dev->v.create_qp(dev->pd, &ia);
    if (qp == NULL)
        return NULL;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = dev->port;
    a.qp_access_flags = access;
    int rc = dev->v.modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        dev->v.destroy_qp(qp);
        errno = rc > 0 ? rc : EINVAL;
        return NULL;
    }
    return qp;
}

void dsc_rdma_qp_describe(const dsc_rdma_dev_t *dev, const struct ibv_qp *qp, uint32_t psn,
                          uint8_t rd_atomic, dsc_rdma_qp_info_t *out) {
    memset(out, 0, sizeof *out);
    out->version = DSC_RDMA_VERSION;
    out->link_layer = dev->link_layer;
    out->port = dev->port;
    out->mtu = dev->mtu;
    out->rd_atomic = rd_atomic;
    out->lid = dev->link_layer == DSC_RDMA_LINK_IB ? dev->lid : 0;
    out->qpn = qp->qp_num;
    out->psn = psn;
    memcpy(out->gid, dev->gid, sizeof out->gid);
    out->device = (dsc_str_t){dev->name, (uint16_t)strlen(dev->name)};
}

int dsc_rdma_qp_rtr(dsc_rdma_dev_t *dev, struct ibv_qp *qp, const dsc_rdma_qp_info_t *remote,
                    uint8_t path_mtu, uint8_t max_dest_rd_atomic) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)path_mtu;
    a.dest_qp_num = remote->qpn;
    a.rq_psn = remote->psn;
    a.max_dest_rd_atomic = max_dest_rd_atomic;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = dev->port;
    if (dev->link_layer == DSC_RDMA_LINK_ETHERNET) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, remote->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)dev->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    } else {
        a.ah_attr.dlid = remote->lid;
    }
    int rc = dev->v.modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    return rc == 0 ? 0 : -(rc > 0 ? rc : EINVAL);
}

int dsc_rdma_qp_rts(dsc_rdma_dev_t *dev, struct ibv_qp *qp, uint32_t psn, uint8_t rd_atomic) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = psn;
    a.timeout = DSC_RDMA_QP_TIMEOUT;
    a.retry_cnt = DSC_RDMA_QP_RETRY;
    a.rnr_retry = 7;
    a.max_rd_atomic = rd_atomic;
    int rc = dev->v.modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    return rc == 0 ? 0 : -(rc > 0 ? rc : EINVAL);
}

void dsc_rdma_qp_fence(dsc_rdma_dev_t *dev, struct ibv_qp *qp) {
    if (qp == NULL)
        return;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    dev->v.modify_qp(qp, &a, IBV_QP_STATE);
    dev->v.destroy_qp(qp);
}

#endif
