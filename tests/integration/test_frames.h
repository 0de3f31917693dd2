/* Raw socket helpers for the integration test clients that write frames by hand: connect to a
 * "host:port" address without the client library, send a buffer whole. Header-only (static
 * inline, so a program pays for what it calls). */
#ifndef DSC_TEST_FRAMES_H
#define DSC_TEST_FRAMES_H

#include "util.h"

#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

/* A blocking TCP socket connected to addr ("host:port"). Returns the fd, or -1 when the address
 * does not parse or resolve or the connection is refused. */
static inline int raw_connect(const char *addr) {
    char host[256];
    uint16_t port;
    if (dsc_split_hostport(addr, host, sizeof host, &port) < 0)
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    char ptext[8];
    snprintf(ptext, sizeof ptext, "%u", port);
    if (getaddrinfo(host, ptext, &hints, &res) != 0)
        return -1;
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* Sends all n bytes at p (retrying on EINTR, never raising SIGPIPE). Returns 0, or -1 when the
 * connection fails or the peer closes first. */
static inline int send_all(int fd, const void *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p = (const uint8_t *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

#endif
