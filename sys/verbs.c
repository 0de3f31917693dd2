/* libibverbs through dlopen (see verbs.h): resolves the exported verbs functions into a table so
 * that nothing links against libibverbs and a fake library can stand in for it in tests. */
#include "verbs.h"

#include "dscache_base.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void say(char *reason, size_t cap, const char *fmt, ...) {
    if (reason == NULL || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, cap, fmt, ap);
    va_end(ap);
}

const char *dsc_verbs_lib_name(void) {
    const char *env = getenv(DSC_VERBS_ENV_LIB);
    return env != NULL && env[0] != '\0' ? env : DSC_VERBS_DEFAULT_LIB;
}

#if DSC_HAVE_VERBS_H

#define LOAD(field, symbol)                                                                        \
    do {                                                                                           \
        *(void **)(&verbs->field) = dlsym(verbs->lib, symbol);                                     \
        if (verbs->field == NULL && missing == NULL)                                               \
            missing = symbol;                                                                      \
    } while (0)
#define LOAD_OPTIONAL(field, symbol) (*(void **)(&verbs->field) = dlsym(verbs->lib, symbol))

int dsc_verbs_open(dsc_verbs_t *verbs, char *reason, size_t reason_cap) {
    memset(verbs, 0, sizeof *verbs);
    const char *name = dsc_verbs_lib_name();
    /* RTLD_GLOBAL is not needed: providers are loaded by libibverbs itself. */
    verbs->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (verbs->lib == NULL) {
        const char *err = dlerror();
        if (getenv(DSC_VERBS_ENV_LIB) != NULL && getenv(DSC_VERBS_ENV_LIB)[0] != '\0')
            say(reason, reason_cap,
                "%s=%s could not be loaded (%s): point it at a libibverbs-compatible library, "
                "or unset it to use %s",
                DSC_VERBS_ENV_LIB, name, err ? err : "?", DSC_VERBS_DEFAULT_LIB);
        else
            say(reason, reason_cap,
                "%s could not be loaded (%s): rdma-core's verbs library is not installed; "
                "install it (Debian/Ubuntu: apt-get install libibverbs1 ibverbs-providers; "
                "RHEL: dnf install libibverbs) or set %s to its path",
                name, err ? err : "?", DSC_VERBS_ENV_LIB);
        return DSC_ENOENT;
    }
    struct link_map *map = NULL;
    if (dlinfo(verbs->lib, RTLD_DI_LINKMAP, &map) == 0 && map != NULL && map->l_name != NULL &&
        map->l_name[0] != '\0') {
        char *real = realpath(map->l_name, NULL);
        snprintf(verbs->path, sizeof verbs->path, "%s", real ? real : map->l_name);
        free(real);
    } else {
        snprintf(verbs->path, sizeof verbs->path, "%s", name);
    }
    const char *missing = NULL;
    LOAD(get_device_list, "ibv_get_device_list");
    LOAD(free_device_list, "ibv_free_device_list");
    LOAD(get_device_name, "ibv_get_device_name");
    LOAD(open_device, "ibv_open_device");
    LOAD(close_device, "ibv_close_device");
    LOAD(query_device, "ibv_query_device");
    /* The exported ibv_query_port is the classic (compat) entry: it fills the prefix of
     * struct ibv_port_attr that every provider supports. */
    LOAD(query_port, "ibv_query_port");
    LOAD(query_gid, "ibv_query_gid");
    LOAD(alloc_pd, "ibv_alloc_pd");
    LOAD(dealloc_pd, "ibv_dealloc_pd");
    LOAD(reg_mr, "ibv_reg_mr");
    LOAD(dereg_mr, "ibv_dereg_mr");
    LOAD(create_comp_channel, "ibv_create_comp_channel");
    LOAD(destroy_comp_channel, "ibv_destroy_comp_channel");
    LOAD(create_cq, "ibv_create_cq");
    LOAD(destroy_cq, "ibv_destroy_cq");
    LOAD(get_cq_event, "ibv_get_cq_event");
    LOAD(ack_cq_events, "ibv_ack_cq_events");
    LOAD(create_qp, "ibv_create_qp");
    LOAD(modify_qp, "ibv_modify_qp");
    LOAD(query_qp, "ibv_query_qp");
    LOAD(destroy_qp, "ibv_destroy_qp");
    LOAD(get_async_event, "ibv_get_async_event");
    LOAD(ack_async_event, "ibv_ack_async_event");
    LOAD(fork_init, "ibv_fork_init");
    LOAD(wc_status_str, "ibv_wc_status_str");
    LOAD_OPTIONAL(is_fork_initialized, "ibv_is_fork_initialized");
    LOAD_OPTIONAL(query_gid_ex, "_ibv_query_gid_ex");
    LOAD_OPTIONAL(reg_dmabuf_mr, "ibv_reg_dmabuf_mr");
    LOAD_OPTIONAL(create_ah, "ibv_create_ah");
    LOAD_OPTIONAL(destroy_ah, "ibv_destroy_ah");
    if (missing != NULL) {
        say(reason, reason_cap,
            "%s (%s) lacks %s: it is not a libibverbs from rdma-core, or too old; install "
            "rdma-core >= 28",
            name, verbs->path, missing);
        memset(verbs, 0, sizeof *verbs);
        return DSC_EPROTO;
    }
    return 0;
}

#else /* !DSC_HAVE_VERBS_H */

int dsc_verbs_open(dsc_verbs_t *verbs, char *reason, size_t reason_cap) {
    memset(verbs, 0, sizeof *verbs);
    say(reason, reason_cap,
        "this build of dscache has no RDMA support: rdma-core's headers (infiniband/verbs.h) "
        "were missing at build time; install libibverbs-dev (deploy/local/setup.sh does) and "
        "rebuild");
    return DSC_ENOTSUP;
}

#endif

void dsc_verbs_close(dsc_verbs_t *verbs) {
    if (verbs == NULL)
        return;
    /* No dlclose: a provider may keep threads or objects alive past the table (see header). */
    memset(verbs, 0, sizeof *verbs);
}

uint32_t dsc_verbs_mtu_bytes(int mtu_enum) {
    return mtu_enum >= 1 && mtu_enum <= 5 ? 128u << mtu_enum : 0;
}

int dsc_verbs_mtu_enum(uint32_t bytes) {
    for (int e = 1; e <= 5; e++)
        if ((128u << e) == bytes)
            return e;
    return 0;
}

int dsc_verbs_gid_unusable(const uint8_t gid[16]) {
    static const uint8_t zero[16];
    if (memcmp(gid, zero, 16) == 0)
        return 1;
    /* fe80::/10: link-local, not routable; RoCE v2 across a router (or a pod network) fails. */
    if (gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80)
        return 1;
    return 0;
}

char *dsc_verbs_gid_format(const uint8_t gid[16], char *buf, size_t cap) {
    static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    char text[INET6_ADDRSTRLEN];
    if (memcmp(gid, v4_prefix, 12) == 0)
        snprintf(text, sizeof text, "::ffff:%u.%u.%u.%u", gid[12], gid[13], gid[14], gid[15]);
    else if (inet_ntop(AF_INET6, gid, text, sizeof text) == NULL)
        snprintf(text, sizeof text, "?");
    snprintf(buf, cap, "%s", text);
    return buf;
}
