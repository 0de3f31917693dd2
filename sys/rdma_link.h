/* One RDMA device opened for dscache's transport: its port, a protection domain, the RoCE v2 GID
 * each connection uses (the one on its TCP connection's subnet: "RDMA follows TCP"), and the RC
 * queue-pair state changes both sides need (RESET -> INIT -> RTR -> RTS). Shared by the server
 * (server/net/rdma.c), the loader (client/lib/source/source_rdma.c) and the doctor; part of
 * dsc_sys. */
#ifndef DSC_SYS_RDMA_LINK_H
#define DSC_SYS_RDMA_LINK_H

#include "protocol.h"
#include "verbs.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define DSC_RDMA_ENV_DEVICE "DSC_RDMA_DEVICE"       /* device name to use (default: the first) */
#define DSC_RDMA_ENV_GID_INDEX "DSC_RDMA_GID_INDEX" /* GID index (default: the TCP subnet's) */
#define DSC_RDMA_MAX_GIDS 256                       /* GID table entries looked at per port */
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
    /* The device-level default GID (logs, the doctor, callers without a TCP address): the first
     * routable RoCE v2 GID, or $DSC_RDMA_GID_INDEX; -1 on InfiniBand. Connections use the GID
     * dsc_rdma_gid_choose picks for their TCP connection's local address instead. */
    int gid_index;
    uint8_t gid[DSC_RDMA_GID_SIZE];
    int gid_tbl_len; /* entries in the port's GID table */
    uint16_t lid;
    uint64_t max_mr_size;
    /* Memory windows (server/net/rdma.c confines READs to leases with them): 1 when the device
     * reports type-2 windows (device_cap_flags MEM_WINDOW_TYPE_2A or _2B, max_mw > 0) and the
     * library has ibv_alloc_mw (inline through context->ops, so no table entry); else 0 and
     * mw_why says which is missing. */
    int mw_type2;
    char mw_why[256];
    char name[64];
    /* Bit i: GID index i passed the address-handle check (dsc_rdma_gid_choose). */
    atomic_uint_fast64_t gid_validated[DSC_RDMA_MAX_GIDS / 64];
} dsc_rdma_dev_t;

/* ---- GID choice ("RDMA follows TCP") ---------------------------------------------------------
 * A RoCE v2 GID is an IP address of a netdev (IPv4 as ::ffff:a.b.c.d). READs only reach the peer
 * when the GID this side sends from is on the network the peer can route to, and the TCP control
 * connection already proves one such network: so each connection uses the GID equal to, else on
 * the subnet of, its TCP connection's local address. The matching is pure (no verbs, no system
 * calls) and unit-tested; dsc_rdma_gid_choose wraps it with the device's table and getifaddrs. */

/* GID types as the table reports them (ibv_query_gid_ex or sysfs gid_attrs/types). */
#define DSC_RDMA_GID_TYPE_UNKNOWN 0 /* neither source said: accepted after every RoCE v2 match */
#define DSC_RDMA_GID_TYPE_IB 1
#define DSC_RDMA_GID_TYPE_ROCE_V1 2 /* never chosen: RoCE v1 is not routable */
#define DSC_RDMA_GID_TYPE_ROCE_V2 3

/* How a GID matched the local address: EXACT the GID is the address; SUBNET it is inside the
 * address's subnet; LOOPBACK a loopback TCP connection (127.0.0.0/8, ::1) with no GID on it: the
 * peer is this host, so a routable GID on a local interface reaches it; FORCED by
 * $DSC_RDMA_GID_INDEX. */
#define DSC_RDMA_GID_EXACT 1
#define DSC_RDMA_GID_SUBNET 2
#define DSC_RDMA_GID_LOOPBACK 3
#define DSC_RDMA_GID_FORCED 4

typedef struct dsc_rdma_gid_entry {
    int index;    /* in the port's GID table */
    int type;     /* DSC_RDMA_GID_TYPE_* */
    int on_local; /* 1: the GID's address is on a local interface (dsc_rdma_gid_mark_local) */
    uint8_t raw[DSC_RDMA_GID_SIZE];
} dsc_rdma_gid_entry_t;

/* Picks among gids[0..count) the GID for a connection whose local address is `local` (AF_INET,
 * or AF_INET6; an IPv4-mapped IPv6 address counts as IPv4) on a subnet of prefix_len bits (in
 * the address family's bits: 0-32 for IPv4, 0-128 for IPv6; -1 when unknown: exact match only).
 * Only RoCE v2 GIDs (then those of unknown type) are candidates; zero and link-local (fe80::/10)
 * GIDs never are. Order: a GID equal to the address, else the first inside the subnet, else, for a
 * loopback address only (the peer is this host), the first GID marked on_local. Returns the
 * position in gids (>= 0) and *how (DSC_RDMA_GID_EXACT/SUBNET/LOOPBACK; how may be NULL), or
 * DSC_ENOENT with one sentence in why naming the address, its subnet and every GID seen (with
 * type), or DSC_EINVAL (not an IP address). Pure: no I/O, thread-safe. */
int dsc_rdma_gid_match(const dsc_rdma_gid_entry_t *gids, int count, const struct sockaddr *local,
                       int prefix_len, int *how, char *why, size_t why_cap);

/* 1 when gid (16 bytes) is `addr` or inside addr/prefix_len (addr and prefix_len as for
 * dsc_rdma_gid_match; -1: equality only), else 0. Pure. */
int dsc_rdma_gid_in_subnet(const uint8_t gid[DSC_RDMA_GID_SIZE], const struct sockaddr *addr,
                           int prefix_len);

/* Sets on_local in each of gids[0..count) (one getifaddrs): 1 when the GID's address lies in the
 * subnet of an address of a local interface. */
void dsc_rdma_gid_mark_local(dsc_rdma_gid_entry_t *gids, int count);

/* The local interface that holds `addr` (getifaddrs): copies its name into ifname (may be NULL)
 * and returns the subnet's prefix length (from its netmask), or -1 when no interface holds it.
 * An IPv4-mapped IPv6 address is looked up as IPv4 (and its prefix is in IPv4 bits). */
int dsc_rdma_local_prefix(const struct sockaddr *addr, char *ifname, size_t ifname_cap);

/* The local interface whose subnet contains gid (IPv4-mapped or IPv6): "lo 127.0.0.0/8" into
 * buf; returns 1, or 0 (buf "") when the GID is on no local interface (e.g. its netdev lives in
 * another network namespace, or the GID is stale). */
int dsc_rdma_gid_local_net(const uint8_t gid[DSC_RDMA_GID_SIZE], char *buf, size_t cap);

/* "127.0.0.1" (IPv4-mapped IPv6 shown as IPv4) into buf; returns buf. */
char *dsc_rdma_addr_format(const struct sockaddr *addr, char *buf, size_t cap);

/* What a connection uses. */
typedef struct dsc_rdma_gid_choice {
    int index;                      /* sgid_index for its QP; -1 on InfiniBand */
    uint8_t gid[DSC_RDMA_GID_SIZE]; /* sent in RDMA_CONNECT */
    int how;                        /* DSC_RDMA_GID_*; 0 on InfiniBand */
    int off_subnet; /* forced by $DSC_RDMA_GID_INDEX and not on the local subnet: READs may fail */
    /* For logs: "GID index 2 ::ffff:127.0.4.5, on the subnet of 127.0.0.1/8 (lo)". */
    char text[256];
} dsc_rdma_gid_choice_t;

/* Loads the verbs library, opens the device ($DSC_RDMA_DEVICE or the first), its first ACTIVE
 * port, the default GID on RoCE (the first routable RoCE v2 GID, never link-local;
 * $DSC_RDMA_GID_INDEX overrides) or the LID on InfiniBand, and allocates a protection domain.
 * Returns 0, or DSC_ENOTSUP / DSC_ENOENT / DSC_EPROTO / DSC_EUNAVAIL (no usable device or port)
 * with one sentence in reason. */
int dsc_rdma_dev_open(dsc_rdma_dev_t *dev, char *reason, size_t reason_cap);
/* Frees the PD and closes the device (every QP, CQ and MR on it must be gone). Takes NULL. */
void dsc_rdma_dev_close(dsc_rdma_dev_t *dev);

#if DSC_HAVE_VERBS_H
/* Reads the GID table of port (tbl_len entries, at most cap, DSC_RDMA_MAX_GIDS) into out, with
 * each entry's type (ibv_query_gid_ex when the library has it, else sysfs
 * /sys/class/infiniband/DEV/ports/P/gid_attrs/types/I); empty (zero) entries are left out.
 * Returns the number of entries. */
int dsc_rdma_gid_table(const dsc_verbs_t *v, struct ibv_context *ctx, const char *dev_name,
                       uint8_t port, int tbl_len, dsc_rdma_gid_entry_t *out, int cap);

/* The GID for a connection whose TCP control connection has the local address `local`
 * (getsockname): dsc_rdma_gid_match over the port's table with the subnet of the interface that
 * holds the address, or $DSC_RDMA_GID_INDEX (then off_subnet says whether it is on that subnet:
 * the caller warns). The first time an index is chosen it is validated with
 * ibv_create_ah/ibv_destroy_ah when the library has them. On InfiniBand: index -1, 0. Returns 0
 * and *out, or DSC_ENOENT (no GID on the subnet), DSC_EUNAVAIL (the forced index is empty or
 * link-local, or the address handle check failed), DSC_EINVAL (not an IP address), with one
 * sentence in why. Thread-safe (reads the table; the validation bits are atomic); blocking only
 * for the table reads and getifaddrs. */
int dsc_rdma_gid_choose(dsc_rdma_dev_t *dev, const struct sockaddr_storage *local,
                        dsc_rdma_gid_choice_t *out, char *why, size_t why_cap);

/* An RC QP on dev's PD with cq for both queues, moved to INIT with `access` (remote access
 * flags). Returns the QP or NULL (errno set). */
struct ibv_qp *dsc_rdma_qp_create(dsc_rdma_dev_t *dev, struct ibv_cq *cq, uint32_t max_send_wr,
                                  int access);
/* This side's description for RDMA_CONNECT (version, link layer, port, MTU, lid, device, and the
 * GID of `gid`: the connection's choice; NULL: the device default). */
void dsc_rdma_qp_describe(const dsc_rdma_dev_t *dev, const dsc_rdma_gid_choice_t *gid,
                          const struct ibv_qp *qp, uint32_t psn, uint8_t rd_atomic,
                          dsc_rdma_qp_info_t *out);
/* INIT -> RTR towards `remote` with the agreed path MTU and READs accepted, sending from the
 * GID index of `gid` (the same choice as described; NULL: the device default). Returns 0 or
 * -errno. */
int dsc_rdma_qp_rtr(dsc_rdma_dev_t *dev, const dsc_rdma_gid_choice_t *gid, struct ibv_qp *qp,
                    const dsc_rdma_qp_info_t *remote, uint8_t path_mtu, uint8_t max_dest_rd_atomic);
/* RTR -> RTS with this side's PSN and READs outstanding. Returns 0 or -errno. */
int dsc_rdma_qp_rts(dsc_rdma_dev_t *dev, struct ibv_qp *qp, uint32_t psn, uint8_t rd_atomic);
/* Moves the QP to ERR (no more READs served or issued) and destroys it. Takes NULL. */
void dsc_rdma_qp_fence(dsc_rdma_dev_t *dev, struct ibv_qp *qp);
#endif

/* A random 24-bit PSN. */
uint32_t dsc_rdma_random_psn(void);

#endif
