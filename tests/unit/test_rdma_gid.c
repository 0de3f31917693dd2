/* "RDMA follows TCP": the GID choice (sys/rdma_link.c dsc_rdma_gid_match) over synthetic
 * GID tables: exact match, subnet match, link-local and RoCE v1 GIDs skipped, no match with a
 * reason naming the address and every GID seen, IPv6, IPv4-mapped addresses, loopback
 * connections, unknown GID types; the subnet test at odd prefix lengths; and the getifaddrs
 * helpers on the loopback interface every Linux host has. */
#include "rdma_link.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#define V2 DSC_RDMA_GID_TYPE_ROCE_V2
#define V1 DSC_RDMA_GID_TYPE_ROCE_V1
#define UNKNOWN DSC_RDMA_GID_TYPE_UNKNOWN

/* A table entry from text: "::ffff:10.0.0.5" or any IPv6 form. */
static dsc_rdma_gid_entry_t gid(int index, int type, const char *text) {
    dsc_rdma_gid_entry_t e;
    memset(&e, 0, sizeof e);
    e.index = index;
    e.type = type;
    REQUIRE(inet_pton(AF_INET6, text, e.raw) == 1);
    return e;
}

static struct sockaddr_storage v4(const char *text) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    in->sin_port = htons(7070);
    REQUIRE(inet_pton(AF_INET, text, &in->sin_addr) == 1);
    return ss;
}

static struct sockaddr_storage v6(const char *text) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(7070);
    REQUIRE(inet_pton(AF_INET6, text, &in6->sin6_addr) == 1);
    return ss;
}

/* dsc_rdma_gid_match -> position (or error) and how. */
static int match(const dsc_rdma_gid_entry_t *t, int n, struct sockaddr_storage addr, int prefix,
                 int *how, char *why, size_t cap) {
    *how = -1;
    return dsc_rdma_gid_match(t, n, (const struct sockaddr *)&addr, prefix, how, why, cap);
}

static void test_ipv4(void) {
    char why[1024];
    int how;
    const dsc_rdma_gid_entry_t t[] = {
        gid(0, V2, "fe80::1"),             /* link-local: never */
        gid(1, V2, "::ffff:10.254.3.4"),   /* another network (the "first routable" trap) */
        gid(2, V2, "::ffff:192.168.1.9"),  /* on 192.168.1.0/24 */
        gid(3, V2, "::ffff:192.168.1.20"), /* the TCP address itself */
        gid(5, V2, "2001:db8:1::5"),       /* IPv6 */
    };
    /* Exact match wins even over an earlier GID on the same subnet. */
    CHECK_EQ_INT(match(t, 5, v4("192.168.1.20"), 24, &how, why, sizeof why), 3);
    CHECK_EQ_INT(how, DSC_RDMA_GID_EXACT);
    /* Subnet match: the first GID inside 192.168.1.0/24, never the earlier routable decoy. */
    CHECK_EQ_INT(match(t, 5, v4("192.168.1.77"), 24, &how, why, sizeof why), 2);
    CHECK_EQ_INT(how, DSC_RDMA_GID_SUBNET);
    /* A narrower subnet holds only .20 (192.168.1.16/28: .16-.31). */
    CHECK_EQ_INT(match(t, 5, v4("192.168.1.17"), 28, &how, why, sizeof why), 3);
    CHECK_EQ_INT(how, DSC_RDMA_GID_SUBNET);
    /* Unknown prefix: exact only. */
    CHECK_EQ_INT(match(t, 5, v4("192.168.1.20"), -1, &how, why, sizeof why), 3);
    CHECK_EQ_INT(match(t, 5, v4("192.168.1.77"), -1, &how, why, sizeof why), DSC_ENOENT);
    /* An IPv4-mapped IPv6 socket address (a dual-stack listener) counts as IPv4. */
    CHECK_EQ_INT(match(t, 5, v6("::ffff:192.168.1.77"), 24, &how, why, sizeof why), 2);
    CHECK_EQ_INT(how, DSC_RDMA_GID_SUBNET);
    /* The IPv4 address never matches an IPv6 GID, whatever the prefix. */
    CHECK_EQ_INT(match(t, 5, v4("10.0.0.1"), 0, &how, why, sizeof why), 1);
    CHECK_EQ_INT(how, DSC_RDMA_GID_SUBNET); /* /0 holds every IPv4 GID: the first one */
}

static void test_no_match(void) {
    char why[1024];
    int how;
    const dsc_rdma_gid_entry_t t[] = {
        gid(0, V2, "fe80::a"),
        gid(1, V2, "::ffff:10.254.3.4"),
        gid(2, V1, "::ffff:172.16.0.9"),
    };
    CHECK_EQ_INT(match(t, 3, v4("172.16.0.50"), 16, &how, why, sizeof why), DSC_ENOENT);
    printf("no match: %s\n", why);
    CHECK(strstr(why, "no RoCE v2 GID is 172.16.0.50 or on its subnet 172.16.0.50/16") != NULL);
    CHECK(strstr(why, "the TCP connection's local address") != NULL);
    CHECK(strstr(why, "0 fe80::a (RoCE v2, link-local)") != NULL);
    CHECK(strstr(why, "1 ::ffff:10.254.3.4 (RoCE v2)") != NULL);
    CHECK(strstr(why, "2 ::ffff:172.16.0.9 (RoCE v1)") != NULL);
    CHECK(how == -1); /* untouched on error */
    /* No prefix: said so. Empty table: "none". */
    CHECK_EQ_INT(match(t, 3, v4("172.16.0.50"), -1, &how, why, sizeof why), DSC_ENOENT);
    CHECK(strstr(why, "no RoCE v2 GID is 172.16.0.50 (on no local interface") != NULL);
    CHECK_EQ_INT(match(t, 0, v4("172.16.0.50"), 16, &how, why, sizeof why), DSC_ENOENT);
    CHECK(strstr(why, "GIDs seen: none") != NULL);
    /* A short buffer is cut, never overrun; NULL is allowed. */
    char small[24];
    memset(small, 'x', sizeof small);
    CHECK_EQ_INT(match(t, 3, v4("172.16.0.50"), 16, &how, small, 16), DSC_ENOENT);
    CHECK(strlen(small) == 15 && small[16] == 'x');
    CHECK_EQ_INT(match(t, 3, v4("172.16.0.50"), 16, &how, NULL, 0), DSC_ENOENT);
    /* Not an IP address. */
    struct sockaddr_storage un;
    memset(&un, 0, sizeof un);
    un.ss_family = AF_UNIX;
    CHECK_EQ_INT(match(t, 3, un, 16, &how, why, sizeof why), DSC_EINVAL);
}

static void test_link_local_and_v1_skipped(void) {
    char why[1024];
    int how;
    /* A link-local TCP address (fe80::/64) would "match" the link-local GID: never chosen. */
    const dsc_rdma_gid_entry_t ll[] = {gid(0, V2, "fe80::1"), gid(1, V1, "fe80::1")};
    CHECK_EQ_INT(match(ll, 2, v6("fe80::1"), 64, &how, why, sizeof why), DSC_ENOENT);
    CHECK_EQ_INT(match(ll, 2, v6("fe80::2"), 64, &how, why, sizeof why), DSC_ENOENT);
    /* The zero GID is never a candidate either (a /0 subnet would hold it). */
    const dsc_rdma_gid_entry_t zero[] = {gid(0, V2, "::")};
    CHECK_EQ_INT(match(zero, 1, v6("2001:db8::1"), 0, &how, why, sizeof why), DSC_ENOENT);
    /* RoCE v1 and RoCE v2 entries for one address, v1 first (as real tables list them). */
    const dsc_rdma_gid_entry_t t[] = {
        gid(0, V1, "fe80::1"),
        gid(1, V2, "fe80::1"),
        gid(2, V1, "::ffff:10.1.2.3"),
        gid(3, V2, "::ffff:10.1.2.3"),
        gid(4, DSC_RDMA_GID_TYPE_IB, "::ffff:10.1.2.4"),
    };
    CHECK_EQ_INT(match(t, 5, v4("10.1.2.3"), 24, &how, why, sizeof why), 3);
    CHECK_EQ_INT(how, DSC_RDMA_GID_EXACT);
    CHECK_EQ_INT(match(t, 5, v4("10.1.2.50"), 24, &how, why, sizeof why), 3);
    /* Only RoCE v1 (and IB) on the subnet: no match. */
    CHECK_EQ_INT(match(t, 3, v4("10.1.2.3"), 24, &how, why, sizeof why), DSC_ENOENT);
    CHECK_EQ_INT(match(t + 4, 1, v4("10.1.2.4"), 24, &how, why, sizeof why), DSC_ENOENT);
}

static void test_ipv6(void) {
    char why[1024];
    int how;
    const dsc_rdma_gid_entry_t t[] = {
        gid(0, V2, "fe80::5054:ff:fe12:3456"),
        gid(1, V2, "::ffff:10.254.3.4"),
        gid(2, V2, "2001:db8:1::5"),
        gid(3, V2, "2001:db8:2::7"),
    };
    CHECK_EQ_INT(match(t, 4, v6("2001:db8:2::99"), 64, &how, why, sizeof why), 3);
    CHECK_EQ_INT(how, DSC_RDMA_GID_SUBNET);
    CHECK_EQ_INT(match(t, 4, v6("2001:db8:1::5"), 64, &how, why, sizeof why), 2);
    CHECK_EQ_INT(how, DSC_RDMA_GID_EXACT);
    /* /32 holds both 2001:db8:1:: and 2001:db8:2::: the first. */
    CHECK_EQ_INT(match(t, 4, v6("2001:db8:2::99"), 32, &how, why, sizeof why), 2);
    CHECK_EQ_INT(match(t, 4, v6("2001:db8:3::1"), 64, &how, why, sizeof why), DSC_ENOENT);
    CHECK(strstr(why, "2001:db8:3::1/64") != NULL && strstr(why, "3 2001:db8:2::7") != NULL);
}

static void test_loopback(void) {
    char why[1024];
    int how;
    /* fakeverbs' table: link-local, a decoy, then the GID on 127.0.0.0/8. */
    const dsc_rdma_gid_entry_t fake[] = {
        gid(0, V2, "fe80::1:2:3"),
        gid(1, V2, "::ffff:10.254.2.3"),
        gid(2, V2, "::ffff:127.1.2.3"),
    };
    CHECK_EQ_INT(match(fake, 3, v4("127.0.0.1"), 8, &how, why, sizeof why), 2);
    CHECK_EQ_INT(how, DSC_RDMA_GID_SUBNET);
    /* A real NIC has no GID on lo: a loopback connection reaches this host, so the first
     * routable RoCE v2 GID on a local interface serves it (the NIC loops the traffic back). */
    dsc_rdma_gid_entry_t nic[] = {
        gid(0, V2, "fe80::1"),         gid(1, V2, "::ffff:10.9.9.9"), /* not local: other netns */
        gid(2, V1, "::ffff:10.0.0.5"), gid(3, V2, "::ffff:10.0.0.5"), gid(4, V2, "::ffff:10.0.1.5"),
    };
    nic[0].on_local = nic[2].on_local = nic[3].on_local = nic[4].on_local = 1;
    CHECK_EQ_INT(match(nic, 5, v4("127.0.0.1"), 8, &how, why, sizeof why), 3);
    CHECK_EQ_INT(how, DSC_RDMA_GID_LOOPBACK);
    CHECK_EQ_INT(match(nic, 5, v6("::1"), 128, &how, why, sizeof why), 3);
    CHECK_EQ_INT(how, DSC_RDMA_GID_LOOPBACK);
    /* ... but a GID on the connection's own subnet still comes first. */
    CHECK_EQ_INT(match(nic, 5, v4("10.0.1.9"), 24, &how, why, sizeof why), 4);
    CHECK_EQ_INT(how, DSC_RDMA_GID_SUBNET);
    /* Not loopback, nothing on the subnet: no fallback to another GID. */
    CHECK_EQ_INT(match(nic, 5, v4("10.0.2.9"), 24, &how, why, sizeof why), DSC_ENOENT);
    /* Loopback, and no routable RoCE v2 GID on a local interface: an error (fakeverbs' decoy
     * alone is such a table). */
    CHECK_EQ_INT(match(nic, 3, v4("127.0.0.1"), 8, &how, why, sizeof why), DSC_ENOENT);
    CHECK_EQ_INT(match(fake, 2, v4("127.0.0.1"), 8, &how, why, sizeof why), DSC_ENOENT);
    CHECK(strstr(why, "1 ::ffff:10.254.2.3 (RoCE v2)") != NULL);
}

static void test_unknown_type(void) {
    char why[1024];
    int how;
    /* Where neither ibv_query_gid_ex nor sysfs tells the type, the GID is still usable ... */
    const dsc_rdma_gid_entry_t t[] = {gid(0, UNKNOWN, "::ffff:10.1.2.3")};
    CHECK_EQ_INT(match(t, 1, v4("10.1.2.3"), 24, &how, why, sizeof why), 0);
    /* ... after a RoCE v2 GID that matches as well. */
    const dsc_rdma_gid_entry_t both[] = {gid(0, UNKNOWN, "::ffff:10.1.2.3"),
                                         gid(1, V2, "::ffff:10.1.2.3")};
    CHECK_EQ_INT(match(both, 2, v4("10.1.2.3"), 24, &how, why, sizeof why), 1);
    CHECK_EQ_INT(how, DSC_RDMA_GID_EXACT);
}

static void test_in_subnet(void) {
    uint8_t g[16];
    struct sockaddr_storage a = v4("10.1.2.3");
    REQUIRE(inet_pton(AF_INET6, "::ffff:10.1.3.255", g) == 1);
    CHECK(dsc_rdma_gid_in_subnet(g, (struct sockaddr *)&a, 23));
    CHECK(!dsc_rdma_gid_in_subnet(g, (struct sockaddr *)&a, 24));
    CHECK(!dsc_rdma_gid_in_subnet(g, (struct sockaddr *)&a, -1));
    REQUIRE(inet_pton(AF_INET6, "::ffff:10.1.4.0", g) == 1);
    CHECK(!dsc_rdma_gid_in_subnet(g, (struct sockaddr *)&a, 23));
    CHECK(dsc_rdma_gid_in_subnet(g, (struct sockaddr *)&a, 21));
    REQUIRE(inet_pton(AF_INET6, "::ffff:10.1.2.3", g) == 1);
    CHECK(dsc_rdma_gid_in_subnet(g, (struct sockaddr *)&a, -1));
    CHECK(dsc_rdma_gid_in_subnet(g, (struct sockaddr *)&a, 32));
    a = v6("2001:db8::1");
    REQUIRE(inet_pton(AF_INET6, "2001:db8::ffff:1", g) == 1);
    CHECK(dsc_rdma_gid_in_subnet(g, (struct sockaddr *)&a, 64));
    CHECK(!dsc_rdma_gid_in_subnet(g, (struct sockaddr *)&a, 127));
    char text[64];
    a = v6("::ffff:192.0.2.1");
    CHECK(strcmp(dsc_rdma_addr_format((struct sockaddr *)&a, text, sizeof text), "192.0.2.1") == 0);
}

/* getifaddrs: 127.0.0.1 is on lo as 127.0.0.0/8 on every Linux host. */
static void test_local_interfaces(void) {
    struct sockaddr_storage lo = v4("127.0.0.1");
    char ifname[32], net[128];
    int prefix = dsc_rdma_local_prefix((struct sockaddr *)&lo, ifname, sizeof ifname);
    if (prefix < 0) {
        printf("note: 127.0.0.1 is on no interface here (no loopback in this namespace?): the "
               "getifaddrs helpers are not checked\n");
        return;
    }
    printf("127.0.0.1: %s/%d\n", ifname, prefix);
    CHECK_EQ_INT(prefix, 8);
    CHECK(strcmp(ifname, "lo") == 0);
    struct sockaddr_storage mapped = v6("::ffff:127.0.0.1");
    CHECK_EQ_INT(dsc_rdma_local_prefix((struct sockaddr *)&mapped, NULL, 0), 8);
    struct sockaddr_storage doc = v4("192.0.2.222"); /* TEST-NET-1, not this host's */
    if (dsc_rdma_local_prefix((struct sockaddr *)&doc, ifname, sizeof ifname) >= 0)
        printf("note: 192.0.2.222 is a local address here\n");
    uint8_t g[16];
    REQUIRE(inet_pton(AF_INET6, "::ffff:127.1.2.3", g) == 1);
    CHECK(dsc_rdma_gid_local_net(g, net, sizeof net) == 1);
    printf("::ffff:127.1.2.3 is on %s\n", net);
    CHECK(strcmp(net, "lo 127.0.0.0/8") == 0);
    REQUIRE(inet_pton(AF_INET6, "::ffff:10.254.1.2", g) == 1);
    int here = dsc_rdma_gid_local_net(g, net, sizeof net);
    if (here)
        printf("note: this host has 10.254.1.2 on %s: fakeverbs' decoy would be local\n", net);
    else
        CHECK(net[0] == '\0');
    dsc_rdma_gid_entry_t t[] = {gid(0, V2, "fe80::1"), gid(1, V2, "::ffff:10.254.1.2"),
                                gid(2, V2, "::ffff:127.1.2.3")};
    t[0].on_local = t[1].on_local = 7;
    dsc_rdma_gid_mark_local(t, 3);
    CHECK(t[0].on_local == 0); /* link-local: never */
    CHECK(t[1].on_local == here);
    CHECK(t[2].on_local == 1);
}

int main(void) {
    test_ipv4();
    test_no_match();
    test_link_local_and_v1_skipped();
    test_ipv6();
    test_loopback();
    test_unknown_type();
    test_in_subnet();
    test_local_interfaces();
    return TEST_DONE();
}
