/* dsc_members_resolve: a member spec ("HOST:PORT,...", "file:PATH", "dns:NAME:PORT") to a
 * canonical member list. The I/O half of placement: parsing and hashing stay in proto/placement.c.
 */
#include "dsc_sys.h"
#include "dscache_base.h"
#include "placement.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static int resolve_dns(const char *rest, dsc_members_t *out) {
    char host[DSC_MEMBER_MAX];
    uint16_t port;
    if (dsc_split_hostport(rest, host, sizeof host, &port) != 0 || port == 0)
        return DSC_EINVAL;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = AF_UNSPEC;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return DSC_EUNAVAIL;
    int rc = 0;
    for (struct addrinfo *ai = res; ai != NULL && rc >= 0; ai = ai->ai_next) {
        char ip[INET6_ADDRSTRLEN];
        char entry[DSC_MEMBER_MAX];
        if (ai->ai_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, ip, sizeof ip);
            snprintf(entry, sizeof entry, "%s:%u", ip, port);
        } else if (ai->ai_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, ip, sizeof ip);
            snprintf(entry, sizeof entry, "[%s]:%u", ip, port);
        } else {
            continue;
        }
        rc = dsc_members_add(out, entry);
    }
    freeaddrinfo(res);
    if (rc < 0) {
        dsc_members_free(out);
        return rc;
    }
    return out->count > 0 ? 0 : DSC_EUNAVAIL;
}

int dsc_members_resolve(const char *spec, dsc_members_t *out) {
    out->count = 0;
    out->addrs = NULL;
    if (spec == NULL)
        return DSC_EINVAL;
    if (strncmp(spec, "dns:", 4) == 0)
        return resolve_dns(spec + 4, out);
    if (strncmp(spec, "file:", 5) != 0)
        return dsc_members_parse(spec, out);
    FILE *f = fopen(spec + 5, "r");
    if (f == NULL)
        return errno == ENOENT ? DSC_ENOENT : DSC_EIO;
    char buf[DSC_MAX_MEMBERS * 48];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    int err = ferror(f);
    fclose(f);
    if (err)
        return DSC_EIO;
    buf[len] = '\0';
    return dsc_members_parse(buf, out);
}
