/* Request dispatch (dispatch.c), called by the transports (tcp.c): one decoded request frame in,
 * answers out through the connection's reply interface (reply.h). */
#ifndef DSC_SERVER_DISPATCH_H
#define DSC_SERVER_DISPATCH_H

#include "protocol.h"
#include "reply.h"
#include "server_core.h"

#include <stdint.h>

/* Handles one request frame (header decoded, body of h->body_len bytes complete) received on
 * reply's connection: answers it through reply->ops now, or for a GET that waits on a load, on
 * the connection's thread once the load is delivered to reply->mailbox. */
void dsc__dispatch_frame(dsc_server_t *srv, dsc_reply_t *reply, const dsc_frame_header_t *h,
                         const uint8_t *body);

#endif
