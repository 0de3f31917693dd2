/* RDMA device, GID choice and RC queue pair set-up shared by the server, the loader and the
 * doctor (rdma_link.h). */
#include "rdma_link.h"
#include "dscache_base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdarg.h>
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

/* ---- GID choice: the pure part ------------------------------------------------------------- */

static const uint8_t v4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* Appends to buf (always NUL-terminated, never overflowing). */
static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
    size_t used = strnlen(buf, cap);
    if (cap == 0 || used + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, cap - used, fmt, ap);
    va_end(ap);
}

/* The address as a 16-byte GID (IPv4 as ::ffff:a.b.c.d) and the prefix in the GID's 128 bits
 * (-1: unknown). Returns 1 for IPv4 (mapped or not), 0 for IPv6, -1 for another family. */
static int addr_as_gid(const struct sockaddr *sa, int prefix_len, uint8_t out[16], int *bits) {
    if (sa == NULL)
        return -1;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        memcpy(out, v4_mapped_prefix, 12);
        memcpy(out + 12, &in->sin_addr, 4);
        *bits = prefix_len < 0 ? -1 : 96 + (prefix_len > 32 ? 32 : prefix_len);
        return 1;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        memcpy(out, &in6->sin6_addr, 16);
        if (memcmp(out, v4_mapped_prefix, 12) == 0) {
            *bits = prefix_len < 0 ? -1 : 96 + (prefix_len > 32 ? 32 : prefix_len);
            return 1;
        }
        *bits = prefix_len < 0 ? -1 : (prefix_len > 128 ? 128 : prefix_len);
        return 0;
    }
    return -1;
}

/* 1 when the first `bits` bits of a and b are equal. */
static int same_prefix(const uint8_t a[16], const uint8_t b[16], int bits) {
    int bytes = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)bytes) != 0)
        return 0;
    if (rest == 0)
        return 1;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[bytes] & mask) == (b[bytes] & mask);
}

static int gid_is_loopback(const uint8_t g[16], int v4) {
    static const uint8_t v6_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return v4 ? g[12] == 127 : memcmp(g, v6_loopback, 16) == 0;
}

static const char *gid_type_name(int type) {
    switch (type) {
    case DSC_RDMA_GID_TYPE_ROCE_V2:
        return "RoCE v2";
    case DSC_RDMA_GID_TYPE_ROCE_V1:
        return "RoCE v1";
    case DSC_RDMA_GID_TYPE_IB:
        return "IB";
    default:
        return "type unknown";
    }
}

char *dsc_rdma_addr_format(const struct sockaddr *addr, char *buf, size_t cap) {
    uint8_t g[16];
    int bits;
    int v4 = addr_as_gid(addr, -1, g, &bits);
    char text[INET6_ADDRSTRLEN] = "?";
    if (v4 == 1)
        inet_ntop(AF_INET, g + 12, text, sizeof text);
    else if (v4 == 0)
        inet_ntop(AF_INET6, g, text, sizeof text);
    snprintf(buf, cap, "%s", text);
    return buf;
}

int dsc_rdma_gid_in_subnet(const uint8_t gid[DSC_RDMA_GID_SIZE], const struct sockaddr *addr,
                           int prefix_len) {
    uint8_t a[16];
    int bits;
    if (addr_as_gid(addr, prefix_len, a, &bits) < 0)
        return 0;
    if (memcmp(gid, a, 16) == 0)
        return 1;
    return bits >= 0 && same_prefix(gid, a, bits);
}

int dsc_rdma_gid_match(const dsc_rdma_gid_entry_t *gids, int count, const struct sockaddr *local,
                       int prefix_len, int *how, char *why, size_t why_cap) {
    char scratch[8];
    if (why == NULL || why_cap == 0) {
        why = scratch;
        why_cap = sizeof scratch;
    }
    why[0] = '\0';
    uint8_t a[16];
    int bits;
    int v4 = addr_as_gid(local, prefix_len, a, &bits);
    if (v4 < 0) {
        snprintf(why, why_cap, "the TCP connection's local address is not an IP address");
        return DSC_EINVAL;
    }
    int loopback = gid_is_loopback(a, v4);
    int best = -1, best_rank = INT_MAX, best_how = 0;
    for (int i = 0; i < count; i++) {
        const dsc_rdma_gid_entry_t *e = &gids[i];
        if (dsc_verbs_gid_unusable(e->raw))
            continue; /* zero or link-local: never */
        if (e->type != DSC_RDMA_GID_TYPE_ROCE_V2 && e->type != DSC_RDMA_GID_TYPE_UNKNOWN)
            continue; /* RoCE v1 (not routable) or IB */
        int h;
        if (memcmp(e->raw, a, 16) == 0)
            h = DSC_RDMA_GID_EXACT;
        else if (bits >= 0 && same_prefix(e->raw, a, bits))
            h = DSC_RDMA_GID_SUBNET;
        else if (loopback && e->on_local)
            h = DSC_RDMA_GID_LOOPBACK;
        else
            continue;
        /* A RoCE v2 GID before one of unknown type; the table order breaks ties. */
        int rank = h * 2 + (e->type == DSC_RDMA_GID_TYPE_UNKNOWN);
        if (rank < best_rank) {
            best = i;
            best_rank = rank;
            best_how = h;
        }
    }
    if (best >= 0) {
        if (how != NULL)
            *how = best_how;
        return best;
    }
    char text[INET6_ADDRSTRLEN];
    dsc_rdma_addr_format(local, text, sizeof text);
    if (prefix_len >= 0)
        snprintf(why, why_cap, "no RoCE v2 GID is %s or on its subnet %s/%d", text, text,
                 prefix_len);
    else
        snprintf(why, why_cap, "no RoCE v2 GID is %s (on no local interface, so no subnet)", text);
    append(why, why_cap, " (the TCP connection's local address); GIDs seen:");
    if (count == 0)
        append(why, why_cap, " none");
    for (int i = 0; i < count; i++) {
        char g[64];
        dsc_verbs_gid_format(gids[i].raw, g, sizeof g);
        append(why, why_cap, "%s %d %s (%s%s)", i ? "," : "", gids[i].index, g,
               gid_type_name(gids[i].type),
               dsc_verbs_gid_unusable(gids[i].raw) ? ", link-local" : "");
    }
    return DSC_ENOENT;
}

static int mask_bits(const struct sockaddr *mask) {
    const uint8_t *p;
    size_t n;
    if (mask == NULL)
        return -1;
    if (mask->sa_family == AF_INET) {
        p = (const uint8_t *)&((const struct sockaddr_in *)(const void *)mask)->sin_addr;
        n = 4;
    } else if (mask->sa_family == AF_INET6) {
        p = (const uint8_t *)&((const struct sockaddr_in6 *)(const void *)mask)->sin6_addr;
        n = 16;
    } else {
        return -1;
    }
    int bits = 0;
    for (size_t i = 0; i < n; i++)
        bits += __builtin_popcount(p[i]);
    return bits;
}

int dsc_rdma_local_prefix(const struct sockaddr *addr, char *ifname, size_t ifname_cap) {
    uint8_t want[16];
    int bits;
    int v4 = addr_as_gid(addr, -1, want, &bits);
    if (ifname != NULL && ifname_cap > 0)
        ifname[0] = '\0';
    struct ifaddrs *list = NULL;
    if (v4 < 0 || getifaddrs(&list) != 0)
        return -1;
    int prefix = -1;
    for (struct ifaddrs *ifa = list; ifa != NULL && prefix < 0; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || ifa->ifa_netmask == NULL ||
            ifa->ifa_addr->sa_family != (v4 ? AF_INET : AF_INET6))
            continue;
        uint8_t have[16];
        if (addr_as_gid(ifa->ifa_addr, -1, have, &bits) < 0 || memcmp(have, want, 16) != 0)
            continue;
        prefix = mask_bits(ifa->ifa_netmask);
        if (prefix >= 0 && ifname != NULL && ifname_cap > 0)
            snprintf(ifname, ifname_cap, "%s", ifa->ifa_name);
    }
    freeifaddrs(list);
    return prefix;
}

/* The interface of `list` whose subnet holds gid: "lo 127.0.0.0/8" into buf (may be NULL);
 * returns 1, or 0. */
static int gid_net_in(const struct ifaddrs *list, const uint8_t gid[16], char *buf, size_t cap) {
    for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || ifa->ifa_netmask == NULL ||
            (ifa->ifa_addr->sa_family != AF_INET && ifa->ifa_addr->sa_family != AF_INET6))
            continue;
        int prefix = mask_bits(ifa->ifa_netmask);
        if (prefix < 0 || !dsc_rdma_gid_in_subnet(gid, ifa->ifa_addr, prefix))
            continue;
        if (buf != NULL) {
            /* The network address: the interface's address with the host bits cleared. */
            uint8_t net[16];
            int bits = 128; /* set by addr_as_gid for both families filtered above */
            int v4 = addr_as_gid(ifa->ifa_addr, prefix, net, &bits);
            if (v4 < 0)
                continue;
            for (int b = bits; b < 128; b++)
                net[b / 8] &= (uint8_t) ~(0x80u >> (b % 8));
            char text[INET6_ADDRSTRLEN] = "?";
            inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? net + 12 : net, text, sizeof text);
            snprintf(buf, cap, "%s %s/%d", ifa->ifa_name, text, prefix);
        }
        return 1;
    }
    return 0;
}

int dsc_rdma_gid_local_net(const uint8_t gid[DSC_RDMA_GID_SIZE], char *buf, size_t cap) {
    if (cap > 0)
        buf[0] = '\0';
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return 0;
    int found = gid_net_in(list, gid, buf, cap);
    freeifaddrs(list);
    return found;
}

void dsc_rdma_gid_mark_local(dsc_rdma_gid_entry_t *gids, int count) {
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        list = NULL;
    for (int i = 0; i < count; i++)
        gids[i].on_local = list != NULL && !dsc_verbs_gid_unusable(gids[i].raw) &&
                           gid_net_in(list, gids[i].raw, NULL, 0);
    if (list != NULL)
        freeifaddrs(list);
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

/* The type of GID index i from sysfs ("RoCE v2", "IB/RoCE v1"): older rdma-core lacks
 * ibv_query_gid_ex. */
static int sysfs_gid_type(const char *dev_name, uint8_t port, int index) {
    char path[256], buf[32] = "";
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d", dev_name,
             port, index);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return DSC_RDMA_GID_TYPE_UNKNOWN;
    if (fgets(buf, sizeof buf, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    if (strcmp(buf, "RoCE v2") == 0)
        return DSC_RDMA_GID_TYPE_ROCE_V2;
    if (strcmp(buf, "IB/RoCE v1") == 0)
        return DSC_RDMA_GID_TYPE_ROCE_V1;
    return DSC_RDMA_GID_TYPE_UNKNOWN;
}

int dsc_rdma_gid_table(const dsc_verbs_t *v, struct ibv_context *ctx, const char *dev_name,
                       uint8_t port, int tbl_len, dsc_rdma_gid_entry_t *out, int cap) {
    int n = 0;
    for (int i = 0; i < tbl_len && i < DSC_RDMA_MAX_GIDS && n < cap; i++) {
        dsc_rdma_gid_entry_t e;
        memset(&e, 0, sizeof e);
        e.index = i;
        int have = 0;
        if (v->query_gid_ex != NULL) {
            struct ibv_gid_entry ge;
            memset(&ge, 0, sizeof ge);
            int rc = v->query_gid_ex(ctx, port, (uint32_t)i, &ge, 0, sizeof ge);
            if (rc == ENODATA || rc == -ENODATA)
                continue; /* an empty entry */
            if (rc == 0) {
                memcpy(e.raw, ge.gid.raw, sizeof e.raw);
                e.type = ge.gid_type == IBV_GID_TYPE_ROCE_V2   ? DSC_RDMA_GID_TYPE_ROCE_V2
                         : ge.gid_type == IBV_GID_TYPE_ROCE_V1 ? DSC_RDMA_GID_TYPE_ROCE_V1
                                                               : DSC_RDMA_GID_TYPE_IB;
                have = 1;
            }
        }
        if (!have) {
            union ibv_gid gid;
            if (v->query_gid(ctx, port, i, &gid) != 0)
                continue;
            memcpy(e.raw, gid.raw, sizeof e.raw);
            e.type = sysfs_gid_type(dev_name, port, i);
        }
        static const uint8_t zero[DSC_RDMA_GID_SIZE];
        if (memcmp(e.raw, zero, sizeof zero) == 0)
            continue;
        out[n++] = e;
    }
    return n;
}

/* The device default: $DSC_RDMA_GID_INDEX, else the first routable RoCE v2 GID (then one of
 * unknown type). Returns its index (dev->gid filled) or -1 with reason. */
static int pick_default_gid(dsc_rdma_dev_t *dev, char *reason, size_t reason_cap) {
    dsc_rdma_gid_entry_t table[DSC_RDMA_MAX_GIDS];
    int n = dsc_rdma_gid_table(&dev->v, dev->ctx, dev->name, dev->port, dev->gid_tbl_len, table,
                               DSC_RDMA_MAX_GIDS);
    int forced = env_int(DSC_RDMA_ENV_GID_INDEX, -1);
    int pick = -1;
    for (int pass = 0; pass < 2 && pick < 0; pass++)
        for (int i = 0; i < n && pick < 0; i++) {
            if (dsc_verbs_gid_unusable(table[i].raw))
                continue;
            if (forced >= 0 ? table[i].index == forced
                            : table[i].type == (pass == 0 ? DSC_RDMA_GID_TYPE_ROCE_V2
                                                          : DSC_RDMA_GID_TYPE_UNKNOWN))
                pick = i;
        }
    if (pick < 0) {
        if (forced >= 0)
            snprintf(reason, reason_cap,
                     "%s=%d names no routable GID of RDMA device %s port %u (empty or "
                     "link-local)",
                     DSC_RDMA_ENV_GID_INDEX, forced, dev->name, dev->port);
        else
            snprintf(reason, reason_cap,
                     "RDMA device %s port %u has no routable RoCE v2 GID (link-local only): "
                     "give the RDMA netdev an address on the TCP network",
                     dev->name, dev->port);
        return -1;
    }
    memcpy(dev->gid, table[pick].raw, sizeof dev->gid);
    return table[pick].index;
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
    uint64_t caps = (uint64_t)da.device_cap_flags;
    if (!(caps & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) || da.max_mw <= 0)
        snprintf(dev->mw_why, sizeof dev->mw_why,
                 "%s reports no type-2 memory windows (device_cap_flags 0x%llx lacks "
                 "MEM_WINDOW_TYPE_2A/2B, max_mw %d)",
                 dev->name, (unsigned long long)caps, da.max_mw);
    else if (dev->ctx->ops.alloc_mw == NULL || dev->ctx->ops.dealloc_mw == NULL)
        snprintf(dev->mw_why, sizeof dev->mw_why,
                 "the verbs library's provider for %s has no ibv_alloc_mw", dev->name);
    else
        dev->mw_type2 = 1;
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
        dev->gid_tbl_len = pa.gid_tbl_len;
        if (dev->link_layer == DSC_RDMA_LINK_ETHERNET) {
            dev->gid_index = pick_default_gid(dev, reason, reason_cap);
            if (dev->gid_index < 0)
                goto fail;
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

/* The text of a choice for logs and reasons. */
static void choice_text(dsc_rdma_gid_choice_t *c, const char *net) {
    char g[64];
    dsc_verbs_gid_format(c->gid, g, sizeof g);
    const char *how = c->how == DSC_RDMA_GID_EXACT      ? "the address of"
                      : c->how == DSC_RDMA_GID_SUBNET   ? "on the subnet of"
                      : c->how == DSC_RDMA_GID_LOOPBACK ? "a local one, for the loopback"
                      : c->off_subnet ? "from " DSC_RDMA_ENV_GID_INDEX ", NOT on the subnet of"
                                      : "from " DSC_RDMA_ENV_GID_INDEX ", on the subnet of";
    snprintf(c->text, sizeof c->text, "GID index %d %s, %s %s", c->index, g, how, net);
}

int dsc_rdma_gid_choose(dsc_rdma_dev_t *dev, const struct sockaddr_storage *local,
                        dsc_rdma_gid_choice_t *out, char *why, size_t why_cap) {
    char scratch[8];
    if (why == NULL || why_cap == 0) {
        why = scratch;
        why_cap = sizeof scratch;
    }
    why[0] = '\0';
    memset(out, 0, sizeof *out);
    out->index = -1;
    if (dev->link_layer != DSC_RDMA_LINK_ETHERNET) {
        snprintf(out->text, sizeof out->text, "InfiniBand LID %u", dev->lid);
        return 0; /* InfiniBand routes by LID: no GID to choose */
    }
    const struct sockaddr *sa = (const struct sockaddr *)local;
    char ifname[IF_NAMESIZE + 1] = "", addr[INET6_ADDRSTRLEN], net[96];
    int prefix = dsc_rdma_local_prefix(sa, ifname, sizeof ifname);
    dsc_rdma_addr_format(sa, addr, sizeof addr);
    if (prefix >= 0)
        snprintf(net, sizeof net, "%s/%d (%s)", addr, prefix, ifname);
    else
        snprintf(net, sizeof net, "%s (on no local interface)", addr);
    dsc_rdma_gid_entry_t table[DSC_RDMA_MAX_GIDS];
    int n = dsc_rdma_gid_table(&dev->v, dev->ctx, dev->name, dev->port, dev->gid_tbl_len, table,
                               DSC_RDMA_MAX_GIDS);
    int forced = env_int(DSC_RDMA_ENV_GID_INDEX, -1);
    int pos = -1;
    if (forced >= 0) {
        for (int i = 0; i < n && pos < 0; i++)
            if (table[i].index == forced && !dsc_verbs_gid_unusable(table[i].raw))
                pos = i;
        if (pos < 0) {
            snprintf(why, why_cap,
                     "%s=%d names no routable GID of RDMA device %s port %u (empty or "
                     "link-local)",
                     DSC_RDMA_ENV_GID_INDEX, forced, dev->name, dev->port);
            return DSC_EUNAVAIL;
        }
        out->how = DSC_RDMA_GID_FORCED;
        out->off_subnet = !dsc_rdma_gid_in_subnet(table[pos].raw, sa, prefix);
    } else {
        char reason[768];
        dsc_rdma_gid_mark_local(table, n); /* for a loopback connection */
        pos = dsc_rdma_gid_match(table, n, sa, prefix, &out->how, reason, sizeof reason);
        if (pos < 0) {
            snprintf(why, why_cap, "RDMA device %s port %u: %s", dev->name, dev->port, reason);
            return pos;
        }
    }
    out->index = table[pos].index;
    memcpy(out->gid, table[pos].raw, sizeof out->gid);
    choice_text(out, net);
    /* Validate once per index: an address handle from this GID to itself is what the kernel
     * resolves for every RoCE packet (route, neighbour, netdev); a GID it cannot use fails here
     * instead of as retry-exceeded READs. */
    atomic_uint_fast64_t *word = &dev->gid_validated[out->index / 64];
    uint64_t bit = UINT64_C(1) << (out->index % 64);
    if (dev->v.create_ah != NULL && dev->v.destroy_ah != NULL && dev->pd != NULL &&
        !(atomic_load(word) & bit)) {
        struct ibv_ah_attr a;
        memset(&a, 0, sizeof a);
        a.is_global = 1;
        a.port_num = dev->port;
        a.grh.sgid_index = (uint8_t)out->index;
        a.grh.hop_limit = 64;
        memcpy(a.grh.dgid.raw, out->gid, 16);
        errno = 0;
        struct ibv_ah *ah = dev->v.create_ah(dev->pd, &a);
        if (ah == NULL) {
            snprintf(why, why_cap,
                     "RDMA device %s port %u: %s failed the address-handle check "
                     "(ibv_create_ah: %s)",
                     dev->name, dev->port, out->text, strerror(errno ? errno : EINVAL));
            return DSC_EUNAVAIL;
        }
        dev->v.destroy_ah(ah);
        atomic_fetch_or(word, bit);
    }
    return 0;
}

void dsc_rdma_qp_describe(const dsc_rdma_dev_t *dev, const dsc_rdma_gid_choice_t *gid,
                          const struct ibv_qp *qp, uint32_t psn, uint8_t rd_atomic,
                          dsc_rdma_qp_info_t *out) {
    memset(out, 0, sizeof *out);
    out->version = DSC_RDMA_VERSION;
    out->link_layer = dev->link_layer;
    out->port = dev->port;
    out->mtu = dev->mtu;
    out->rd_atomic = rd_atomic;
    out->lid = dev->link_layer == DSC_RDMA_LINK_IB ? dev->lid : 0;
    out->qpn = qp->qp_num;
    out->psn = psn;
    memcpy(out->gid, gid != NULL ? gid->gid : dev->gid, sizeof out->gid);
    out->device = (dsc_str_t){dev->name, (uint16_t)strlen(dev->name)};
}

int dsc_rdma_qp_rtr(dsc_rdma_dev_t *dev, const dsc_rdma_gid_choice_t *gid, struct ibv_qp *qp,
                    const dsc_rdma_qp_info_t *remote, uint8_t path_mtu,
                    uint8_t max_dest_rd_atomic) {
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
        a.ah_attr.grh.sgid_index = (uint8_t)(gid != NULL ? gid->index : dev->gid_index);
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
