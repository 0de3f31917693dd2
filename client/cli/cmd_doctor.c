/* dscache doctor: an RDMA preflight of this machine in one readable block (verbs library,
 * devices, ports, MTU, RoCE v2 GIDs and their networks, locked-memory limit, fork safety, huge
 * pages), each failed check with its fix; with --server, the local address and GID a connection
 * to that server uses, then an RDMA_CONNECT and a READ of its probe region.
 */
#include "cli.h"

#include "credential.h"
#include "dscache.h"
#include "rdma_link.h"
#include "source_rdma.h"
#include "util.h"
#include "verbs.h"

#include <getopt.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define CMD "doctor"
/* Exit codes beyond cli.h's: RDMA cannot be used here (TCP will be). */
#define DOCTOR_UNAVAILABLE 3
#define DEFAULT_PIN_BYTES (128ull << 20) /* 2 x the loader's default inflight_bytes (64 MiB) */

static void print_help(void) {
    printf("usage: dscache doctor [--pin-bytes SIZE] [--server HOST:PORT [--auth-file FILE]]\n"
           "\n"
           "Checks whether RDMA can be used on this machine and prints one line per check;\n"
           "each failed check says how to fix it. Each routable RoCE v2 GID is listed with the\n"
           "local interface and subnet it is on: a connection uses the GID on the subnet of\n"
           "its TCP connection's local address (DSC_RDMA_GID_INDEX forces an index).\n"
           "\n"
           "  --pin-bytes SIZE     bytes this process will register (pin) for RDMA, compared\n"
           "                       with RLIMIT_MEMLOCK (default 128M: twice the loader's\n"
           "                       default inflight_bytes; a server pins its whole arena)\n"
           "  --server HOST:PORT   say which local address a connection to this dscached\n"
           "                       leaves from and which GID is on its subnet, then connect\n"
           "                       over RDMA (RDMA_CONNECT) and READ its 4 KiB probe region,\n"
           "                       checked against its checksum\n"
           "  --auth-file FILE     token file (NAME SECRET) the probe authenticates with, for a\n"
           "                       server started with --auth-file; without it\n"
           "                       $DSCACHE_TOKEN_FILE, else %s when it exists,\n"
           "                       else anonymous (as the loader does)\n"
           "  -h, --help           this text\n"
           "\n"
           "The verbs library is libibverbs.so.1, or the file named by DSC_IBVERBS_LIB.\n"
           "\n"
           "exit status: 0  every check passed (warnings allowed)\n"
           "             1  the doctor itself failed\n"
           "             2  usage error\n"
           "             3  RDMA is unavailable here (a check failed); TCP will be used\n",
           DSC_TOKEN_DEFAULT_PATH);
}

static const struct option long_options[] = {
    {"pin-bytes", required_argument, NULL, 'p'},
    {"server", required_argument, NULL, 's'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

typedef struct report {
    int failed, warned;
} report_t;

/* One check line: a name, a verdict (ok, WARN, FAIL, info) and a message; a fix on its own
 * line under failures and warnings. */
static void line(report_t *r, const char *verdict, const char *name, const char *fix,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void line(report_t *r, const char *verdict, const char *name, const char *fix,
                 const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("  %-20s %-5s %s\n", name, verdict, msg);
    if (fix != NULL)
        printf("  %-20s       fix: %s\n", "", fix);
    if (strcmp(verdict, "FAIL") == 0)
        r->failed++;
    else if (strcmp(verdict, "WARN") == 0)
        r->warned++;
}

/* Effective capabilities from /proc/self/status; 1 when CAP_IPC_LOCK (14) is in them. */
static int has_ipc_lock(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return 0;
    char buf[256];
    unsigned long long caps = 0;
    while (fgets(buf, sizeof buf, f) != NULL)
        if (sscanf(buf, "CapEff: %llx", &caps) == 1)
            break;
    fclose(f);
    return (caps >> 14) & 1;
}

static void check_memlock(report_t *r, uint64_t pin_bytes) {
    struct rlimit lim;
    char a[32], b[32];
    dsc_format_size(pin_bytes, b, sizeof b);
    if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) {
        line(r, "WARN", "locked memory", NULL, "RLIMIT_MEMLOCK unreadable");
        return;
    }
    int cap = has_ipc_lock();
    if (lim.rlim_cur == RLIM_INFINITY) {
        line(r, "ok", "locked memory", NULL, "RLIMIT_MEMLOCK unlimited (%s to pin)", b);
    } else if ((uint64_t)lim.rlim_cur >= pin_bytes) {
        line(r, "ok", "locked memory", NULL, "RLIMIT_MEMLOCK %s >= %s to pin",
             dsc_format_size(lim.rlim_cur, a, sizeof a), b);
    } else if (cap) {
        line(r, "ok", "locked memory", NULL,
             "RLIMIT_MEMLOCK %s < %s to pin, but CAP_IPC_LOCK is effective (uid %u)",
             dsc_format_size(lim.rlim_cur, a, sizeof a), b, (unsigned)geteuid());
    } else {
        line(r, "FAIL", "locked memory",
             "raise the limit: docker run --ulimit memlock=-1; systemd LimitMEMLOCK=infinity "
             "(containerd too); limits.conf '* - memlock unlimited'; in Kubernetes run as root "
             "with capability IPC_LOCK (it is inert for non-root) or raise the runtime default",
             "RLIMIT_MEMLOCK %s < %s to pin and no CAP_IPC_LOCK: registration would fail",
             dsc_format_size(lim.rlim_cur, a, sizeof a), b);
    }
}

static void check_hugepages(report_t *r) {
    unsigned long long total = 0, free_pages = 0, size_kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f != NULL) {
        char buf[256];
        while (fgets(buf, sizeof buf, f) != NULL) {
            sscanf(buf, "HugePages_Total: %llu", &total);
            sscanf(buf, "HugePages_Free: %llu", &free_pages);
            sscanf(buf, "Hugepagesize: %llu kB", &size_kb);
        }
        fclose(f);
    }
    char thp[128] = "unknown";
    f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f != NULL) {
        char buf[128];
        if (fgets(buf, sizeof buf, f) != NULL) {
            char *open = strchr(buf, '['), *close = open ? strchr(open, ']') : NULL;
            if (open && close) {
                *close = '\0';
                snprintf(thp, sizeof thp, "%s", open + 1);
            }
        }
        fclose(f);
    }
    int thp_usable = strcmp(thp, "always") == 0 || strcmp(thp, "madvise") == 0;
    if (total > 0 || thp_usable)
        line(r, "ok", "huge pages", NULL,
             "transparent huge pages '%s'; %llu of %llu hugetlb pages of %llu KiB free", thp,
             free_pages, total, size_kb);
    else
        line(r, "WARN", "huge pages",
             "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled, or reserve hugetlb "
             "pages (vm.nr_hugepages)",
             "no transparent huge pages ('%s') and no hugetlb pages: registering large "
             "regions is several times slower with 4 KiB pages",
             thp);
}

#if DSC_HAVE_VERBS_H

static int path_exists(const char *path) {
    return access(path, F_OK) == 0;
}

static const char *port_state_name(enum ibv_port_state s) {
    switch (s) {
    case IBV_PORT_DOWN:
        return "DOWN";
    case IBV_PORT_INIT:
        return "INIT";
    case IBV_PORT_ARMED:
        return "ARMED";
    case IBV_PORT_ACTIVE:
        return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
        return "ACTIVE_DEFER";
    default:
        return "NOP";
    }
}

/* Checks one port; returns 1 when it can carry dscache's RDMA traffic. */
static int check_port(report_t *r, const dsc_verbs_t *v, struct ibv_context *ctx, const char *dev,
                      int port) {
    char name[48];
    snprintf(name, sizeof name, "%s port %d", dev, port);
    struct ibv_port_attr pa;
    memset(&pa, 0, sizeof pa);
    if (v->query_port(ctx, (uint8_t)port, &pa) != 0) {
        line(r, "FAIL", name, "check the driver (dmesg, rdma link)", "cannot query the port");
        return 0;
    }
    int ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    int ok = 1;
    if (pa.state != IBV_PORT_ACTIVE) {
        line(r, "FAIL", name,
             "bring the link up (cable, switch port, 'ip link set DEV up'; 'rdma link' and "
             "'ibstat' show the state)",
             "state %s (needs ACTIVE), link layer %s", port_state_name(pa.state),
             ethernet ? "Ethernet (RoCE)" : "InfiniBand");
        ok = 0;
    } else {
        line(r, "ok", name, NULL, "state ACTIVE, link layer %s",
             ethernet ? "Ethernet (RoCE)" : "InfiniBand");
    }
    uint32_t mtu = dsc_verbs_mtu_bytes(pa.active_mtu);
    if (mtu >= 4096)
        line(r, "ok", "  active MTU", NULL, "%u bytes (max %u)", mtu,
             dsc_verbs_mtu_bytes(pa.max_mtu));
    else
        line(r, "WARN", "  active MTU",
             ethernet ? "raise the netdev MTU to 4200 or more (ip link set DEV mtu 9000)" : NULL,
             "%u bytes (max %u): works (both ends use the smaller MTU), ~93%% wire efficiency "
             "at 1024 against ~98%% at 4096",
             mtu, dsc_verbs_mtu_bytes(pa.max_mtu));
    if (!ethernet) {
        if (pa.lid == 0) {
            line(r, "FAIL", "  LID", "start a subnet manager (opensm) on the fabric",
                 "no LID assigned");
            ok = 0;
        } else {
            line(r, "ok", "  LID", NULL, "%u", pa.lid);
        }
        return ok;
    }
    /* RoCE: the routable RoCE v2 GIDs (never a link-local one), each with the local network it
     * is on: a connection uses the one on its TCP connection's subnet. */
    dsc_rdma_gid_entry_t table[DSC_RDMA_MAX_GIDS];
    int n =
        dsc_rdma_gid_table(v, ctx, dev, (uint8_t)port, pa.gid_tbl_len, table, DSC_RDMA_MAX_GIDS);
    int routable = 0, on_local = 0, link_local = 0, v1 = 0;
    for (int i = 0; i < n; i++) {
        if (dsc_verbs_gid_unusable(table[i].raw)) {
            link_local++;
            continue;
        }
        if (table[i].type != DSC_RDMA_GID_TYPE_ROCE_V2 &&
            table[i].type != DSC_RDMA_GID_TYPE_UNKNOWN) {
            v1++;
            continue;
        }
        routable++;
        char text[64], net[128];
        dsc_verbs_gid_format(table[i].raw, text, sizeof text);
        int here = dsc_rdma_gid_local_net(table[i].raw, net, sizeof net);
        on_local += here;
        line(r, here ? "ok" : "info", "  RoCE v2 GID", NULL, "index %d: %s, %s%s%s", table[i].index,
             text, here ? "on " : "on no local interface", here ? net : "",
             table[i].type == DSC_RDMA_GID_TYPE_UNKNOWN ? " (type unknown: taken as RoCE v2)" : "");
    }
    char skipped[96] = "";
    if (link_local || v1)
        snprintf(skipped, sizeof skipped, " (%s%s%s skipped)", link_local ? "link-local GIDs" : "",
                 link_local && v1 ? " and " : "", v1 ? "RoCE v1 GIDs" : "");
    if (routable == 0) {
        line(r, "FAIL", "  RoCE v2 GIDs",
             "give the RDMA netdev an IPv4 (or global IPv6) address on the TCP network; in a "
             "pod, attach the RDMA interface (Multus macvlan/SR-IOV) so its address has a GID",
             "no routable RoCE v2 GID%s: RoCE v2 traffic across a router or pod network would "
             "fail",
             skipped);
        ok = 0;
    } else if (on_local == 0) {
        line(r, "WARN", "  RoCE v2 GIDs",
             "assign an IP on the RDMA netdev in the same subnet as the TCP network; in a pod, "
             "attach the RDMA netdev (Multus/SR-IOV) so its address is in the pod's network",
             "%d routable, none on a local interface%s: a connection uses the GID on its TCP "
             "connection's subnet, and none is",
             routable, skipped);
    } else {
        line(r, "ok", "  RoCE v2 GIDs", NULL,
             "%d routable, %d on a local interface%s; a connection uses the one on its TCP "
             "connection's subnet",
             routable, on_local, skipped);
    }
    return ok;
}

/* --server: the local address a TCP connection to server leaves from (the kernel's route to it:
 * a connected UDP socket sends nothing) and the GID on its subnet. Returns 1 when one is. */
static int check_path(report_t *r, const char *server) {
    char host[256], port_text[8];
    uint16_t port = 0;
    if (dsc_split_hostport(server, host, sizeof host, &port) != 0)
        return 0;
    snprintf(port_text, sizeof port_text, "%u", port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_DGRAM;
    int grc = getaddrinfo(host, port_text, &hints, &ai);
    if (grc != 0) {
        line(r, "FAIL", "TCP path", "check the name (DNS, /etc/hosts)", "cannot resolve %s: %s",
             host, gai_strerror(grc));
        return 0;
    }
    struct sockaddr_storage local;
    socklen_t local_len = sizeof local;
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
             getsockname(fd, (struct sockaddr *)&local, &local_len) == 0;
    int err = errno;
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    if (!ok) {
        line(r, "FAIL", "TCP path", "check the routes to the server (ip route get ADDRESS)",
             "no route to %s: %s", server, strerror(err));
        return 0;
    }
    char addr[64], ifname[32] = "";
    dsc_rdma_addr_format((struct sockaddr *)&local, addr, sizeof addr);
    int prefix = dsc_rdma_local_prefix((struct sockaddr *)&local, ifname, sizeof ifname);
    if (prefix >= 0)
        line(r, "ok", "TCP path", NULL, "to %s leaves from %s/%d (%s)", server, addr, prefix,
             ifname);
    else
        line(r, "info", "TCP path", NULL, "to %s leaves from %s (on no local interface)", server,
             addr);
    dsc_rdma_dev_t dev;
    char why[1024];
    if (dsc_rdma_dev_open(&dev, why, sizeof why) < 0) {
        line(r, "FAIL", "  GID for it", NULL, "%s", why);
        return 0;
    }
    dsc_rdma_gid_choice_t gid;
    int rc = dsc_rdma_gid_choose(&dev, &local, &gid, why, sizeof why);
    dsc_rdma_dev_close(&dev);
    if (rc < 0) {
        char fix[512], subnet[96];
        if (prefix >= 0)
            snprintf(subnet, sizeof subnet, "%s/%d", addr, prefix);
        else
            snprintf(subnet, sizeof subnet, "%s", addr);
        snprintf(fix, sizeof fix,
                 "assign an IP on the RDMA netdev in the same subnet as %s (ip addr add "
                 "ADDRESS/PREFIX dev NETDEV), or route this server's TCP traffic over the RDMA "
                 "netdev",
                 subnet);
        line(r, "FAIL", "  GID for it", fix, "%s", why);
        return 0;
    }
    if (gid.off_subnet)
        line(r, "WARN", "  GID for it",
             "unset " DSC_RDMA_ENV_GID_INDEX " (the GID on the subnet is then chosen), or set "
             "it to a GID on that subnet",
             "%s: READs to this server may fail", gid.text);
    else
        line(r, "ok", "  GID for it", NULL, "%s", gid.text);
    return 1;
}

static int check_verbs(report_t *r, dsc_verbs_t *v) {
    int num = 0;
    struct ibv_device **list = v->get_device_list(&num);
    if (list == NULL || num <= 0) {
        int sys = path_exists("/sys/class/infiniband");
        int dev = path_exists("/dev/infiniband/uverbs0");
        const char *why =
            !sys   ? "the kernel exposes no RDMA device (/sys/class/infiniband is absent): this "
                     "machine has no RDMA NIC, or its driver (mlx5_ib, irdma, efa, rdma_rxe, ...) "
                     "is not loaded"
            : !dev ? "the kernel has RDMA devices but /dev/infiniband/uverbs* is not here: in a "
                     "container, pass /dev/infiniband through (an RDMA device plugin)"
                   : "devices exist but none could be listed: check permissions on "
                     "/dev/infiniband/uverbs* and that ibverbs-providers is installed";
        line(r, "FAIL", "devices",
             !sys   ? "use a host with an RDMA NIC (or load Soft-RoCE: modprobe rdma_rxe; rdma "
                      "link add rxe0 type rxe netdev DEV), or keep TCP"
             : !dev ? "run the pod with an RDMA resource (k8s-rdma-shared-dev-plugin or SR-IOV) "
                      "and hostNetwork or a Multus RDMA attachment"
                    : "install ibverbs-providers; make /dev/infiniband/uverbs* readable",
             "none: %s", why);
        if (list != NULL)
            v->free_device_list(list);
        return 0;
    }
    char names[512] = "";
    for (int i = 0; i < num; i++) {
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                 v->get_device_name(list[i]));
    }
    line(r, "ok", "devices", NULL, "%d: %s", num, names);
    int usable = 0;
    for (int i = 0; i < num; i++) {
        const char *dev = v->get_device_name(list[i]);
        struct ibv_context *ctx = v->open_device(list[i]);
        if (ctx == NULL) {
            line(r, "FAIL", dev, "check permissions on /dev/infiniband/uverbs*",
                 "cannot open the device");
            continue;
        }
        struct ibv_device_attr da;
        if (v->query_device(ctx, &da) == 0) {
            char a[32];
            line(r, "info", dev, NULL, "fw %s, %u port(s), max_mr_size %s, max_qp_rd_atom %d",
                 da.fw_ver, da.phys_port_cnt, dsc_format_size(da.max_mr_size, a, sizeof a),
                 da.max_qp_rd_atom);
            /* dscached confines READs to leases with type-2 memory windows (docs/rdma.md). */
            if ((da.device_cap_flags &
                 (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) &&
                da.max_mw > 0 && ctx->ops.alloc_mw != NULL)
                line(r, "ok", "memory windows", NULL,
                     "type 2 (max_mw %d): a server here confines RDMA READs to leased chunks",
                     da.max_mw);
            else
                line(r, "WARN", "memory windows",
                     "a device with type-2 memory windows (ConnectX-4 or later) for limited "
                     "credentials over RDMA",
                     "%s has no type-2 memory windows (device_cap_flags 0x%llx, max_mw %d): a "
                     "server here cannot confine RDMA READs to leased chunks, so it refuses RDMA "
                     "to credentials limited to some datasets (they use TCP)",
                     dev, (unsigned long long)da.device_cap_flags, da.max_mw);
            for (int p = 1; p <= da.phys_port_cnt; p++)
                usable += check_port(r, v, ctx, dev, p);
        }
        v->close_device(ctx);
    }
    v->free_device_list(list);
    return usable > 0;
}

static void check_fork(report_t *r, const dsc_verbs_t *v) {
    if (v->is_fork_initialized == NULL) {
        line(r, "info", "fork safety", NULL,
             "unknown (rdma-core < 35): ibv_fork_init() will be called before registering, "
             "since data loader workers fork");
        return;
    }
    enum ibv_fork_status s = v->is_fork_initialized();
    if (s == IBV_FORK_UNNEEDED)
        line(r, "ok", "fork safety", NULL,
             "not needed: the kernel copies pinned pages on fork (forked workers cannot use "
             "the parent's loader either way)");
    else
        line(r, "ok", "fork safety", NULL,
             "%s: ibv_fork_init() will be called before the first registration",
             s == IBV_FORK_ENABLED ? "enabled" : "not enabled yet");
}

#endif

int dsc_cmd_doctor(int argc, char **argv) {
    uint64_t pin_bytes = DEFAULT_PIN_BYTES;
    const char *server = NULL;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
        switch (opt) {
        case 'p':
            if (dsc_cli_parse_size(CMD, "--pin-bytes", optarg, &pin_bytes) < 0)
                return DSC_CLI_USAGE;
            break;
        case 's': {
            char host[256];
            uint16_t port;
            if (dsc_split_hostport(optarg, host, sizeof host, &port) != 0)
                return dsc_cli_usage(CMD, "--server: '%s' is not HOST:PORT", optarg);
            server = optarg;
            break;
        }
        case 'h':
            print_help();
            return DSC_CLI_OK;
        default:
            return dsc_cli_usage(CMD, "unknown option");
        }
    }
    if (optind < argc)
        return dsc_cli_usage(CMD, "unexpected argument '%s'", argv[optind]);

    report_t r = {0, 0};
    printf("dscache doctor: RDMA preflight\n");
    dsc_verbs_t v;
    char reason[DSC_VERBS_REASON_MAX];
    int rc = dsc_verbs_open(&v, reason, sizeof reason);
    int usable = 0;
    if (rc < 0) {
        line(&r, "FAIL", "verbs library", NULL, "%s", reason);
    } else {
        line(&r, "ok", "verbs library", NULL, "%s (%s)", v.path, dsc_verbs_lib_name());
#if DSC_HAVE_VERBS_H
        usable = check_verbs(&r, &v);
        check_fork(&r, &v);
#endif
    }
    check_memlock(&r, pin_bytes);
    check_hugepages(&r);
    dsc_verbs_close(&v);
    if (server != NULL && usable) {
#if DSC_HAVE_VERBS_H
        check_path(&r, server);
#endif
        /* The credential, as the loader finds it (--auth-file, $DSCACHE_TOKEN_FILE, the default
         * path): a server with --auth-file refuses RDMA_CONNECT from anonymous clients. */
        dsc_credential_t cred;
        char why[1024] = "", device[256] = "";
        const char *auth_file = dsc_cli_auth_file();
        int found = dsc__credential_load(auth_file, &cred, why, sizeof why);
        if (found < 0) {
            line(&r, "FAIL", "credential", "give a readable token file (NAME SECRET)", "%s", why);
        } else {
            if (found)
                line(&r, "info", "credential", NULL, "authenticating as %s (%s)", cred.name,
                     auth_file != NULL && auth_file[0] != '\0' ? auth_file
                     : getenv(DSC_TOKEN_ENV) != NULL && getenv(DSC_TOKEN_ENV)[0] != '\0'
                         ? "$" DSC_TOKEN_ENV
                         : DSC_TOKEN_DEFAULT_PATH);
            double t0 = dsc_now_s();
            int prc = dsc__rdma_probe(server, 5000, found ? &cred : NULL, why, sizeof why, device,
                                      sizeof device);
            if (prc == 0)
                line(&r, "ok", "probe READ", NULL,
                     "4096 bytes READ from %s over %s in %.1f ms (connect + READ), checksum ok",
                     server, device, (dsc_now_s() - t0) * 1e3);
            else if (prc == DSC_EUNAUTH)
                line(&r, "FAIL", "probe READ",
                     found ? "the server's --auth-file must list this NAME with this SECRET"
                           : "the server authenticates: give its token with --auth-file FILE "
                             "(or $" DSC_TOKEN_ENV ")",
                     "%s", why);
            else
                line(&r, "FAIL", "probe READ",
                     "check the server runs with --rdma auto|required and a device ('rdma: on' "
                     "in its log), and the routing/GID/PFC between the two hosts",
                     "%s", why);
        }
        dsc__credential_wipe(&cred);
    } else if (server != NULL) {
        line(&r, "info", "probe READ", NULL, "skipped: no usable RDMA device here");
    }
    if (r.failed > 0 || !usable) {
        printf("verdict: RDMA unavailable here (%d check%s failed); dscache uses TCP\n", r.failed,
               r.failed == 1 ? "" : "s");
        return DOCTOR_UNAVAILABLE;
    }
    printf("verdict: RDMA preflight passed%s; loaders with transport auto or rdma READ chunk "
           "bytes by RDMA\n",
           r.warned ? " (see the warnings above)" : "");
    return DSC_CLI_OK;
}
