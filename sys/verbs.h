/* libibverbs through dlopen: a table of the exported verbs functions that dscache uses, so the
 * server and the client load where rdma-core is absent, and tests can swap in a fake library
 * (DSC_IBVERBS_LIB). Shared by server and client; part of the dsc_sys library. */
#ifndef DSC_SYS_VERBS_H
#define DSC_SYS_VERBS_H

#include <stddef.h>
#include <stdint.h>

/* DSC_HAVE_VERBS_H is 1 when rdma-core's <infiniband/verbs.h> was there at build time; without
 * it the table has no function pointers and dsc_verbs_open always fails with DSC_ENOTSUP. */
#if defined(__has_include)
#if __has_include(<infiniband/verbs.h>) && !defined(DSC_NO_VERBS_H)
#define DSC_HAVE_VERBS_H 1
#include <infiniband/verbs.h>
#endif
#endif
#ifndef DSC_HAVE_VERBS_H
#define DSC_HAVE_VERBS_H 0
#endif

#define DSC_VERBS_DEFAULT_LIB "libibverbs.so.1"
#define DSC_VERBS_ENV_LIB "DSC_IBVERBS_LIB"
#define DSC_VERBS_REASON_MAX 512

/* The function table. Every pointer marked "required" is non-NULL after a successful open; the
 * optional ones are NULL when the library lacks them (older rdma-core). The data path
 * (ibv_post_send, ibv_poll_cq, ibv_req_notify_cq, ibv_post_recv) is static inline in verbs.h
 * and goes through context->ops, so it needs no entry here; so do the memory-window calls the
 * server confines READs with (ibv_alloc_mw, ibv_dealloc_mw; binds and invalidations are
 * ibv_post_send WRs), whose presence dsc_rdma_dev_open checks (rdma_link.h mw_type2). Do not use
 * the ibv_query_port and ibv_reg_mr macros of verbs.h with a library loaded this way: call
 * query_port and reg_mr from the table (query_port takes a zeroed struct ibv_port_attr, of which
 * the library fills the classic prefix). */
typedef struct dsc_verbs {
    void *lib;
    char path[4096]; /* where the library was loaded from (as the dynamic loader resolved it) */
#if DSC_HAVE_VERBS_H
    /* required */
    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                    struct ibv_qp_init_attr *init_attr);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*get_async_event)(struct ibv_context *context, struct ibv_async_event *event);
    void (*ack_async_event)(struct ibv_async_event *event);
    int (*fork_init)(void);
    const char *(*wc_status_str)(enum ibv_wc_status status);
    /* optional */
    enum ibv_fork_status (*is_fork_initialized)(void); /* rdma-core >= 35 */
    int (*query_gid_ex)(struct ibv_context *context, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size); /* 32 */
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length,
                                    uint64_t iova, int fd, int access); /* rdma-core >= 34 */
    /* The GID check (rdma_link.c): skipped where a library does not export them. */
    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int (*destroy_ah)(struct ibv_ah *ah);
#endif
} dsc_verbs_t;

/* Loads the verbs library: $DSC_IBVERBS_LIB when set and non-empty, else libibverbs.so.1,
 * and resolves the table into *verbs (caller-owned memory). Returns 0, or on failure one of
 * DSC_ENOTSUP (built without rdma-core headers), DSC_ENOENT (the library could not be loaded),
 * DSC_EPROTO (it lacks a required symbol); then `reason` (reason_cap bytes, may be NULL) holds
 * one plain sentence saying what is missing and how to fix it, and *verbs holds no library.
 * The library stays loaded for the life of the process even after dsc_verbs_close: verbs
 * objects may outlive the table. Does not log, never exits. Thread-safe (dlopen is). */
int dsc_verbs_open(dsc_verbs_t *verbs, char *reason, size_t reason_cap);

/* Forgets the table (the library stays mapped, see dsc_verbs_open). Takes NULL. */
void dsc_verbs_close(dsc_verbs_t *verbs);

/* The library name dsc_verbs_open would try: $DSC_IBVERBS_LIB or libibverbs.so.1. */
const char *dsc_verbs_lib_name(void);

/* MTU in bytes for an ibv_mtu enum value (1..5 -> 256..4096), 0 for anything else; and back
 * (0 for a size that is not one of the five). Usable without the header (plain integers). */
uint32_t dsc_verbs_mtu_bytes(int mtu_enum);
int dsc_verbs_mtu_enum(uint32_t bytes);

/* 1 when the 16-byte GID is zero, an IPv6 link-local address (fe80::/10), or otherwise not
 * usable for routed RoCE v2 traffic; 0 when it is a usable global/IPv4-mapped GID. */
int dsc_verbs_gid_unusable(const uint8_t gid[16]);

/* Formats a GID as text: IPv4-mapped GIDs as "::ffff:a.b.c.d", others as IPv6. Returns buf. */
char *dsc_verbs_gid_format(const uint8_t gid[16], char *buf, size_t cap);

#endif
