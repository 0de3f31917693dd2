/* The TCP transport (tcp.c), called by server.c: the loops' accept, tick and adoption callbacks,
 * drain and close, and a loop's end once its connections are gone. All on the loop's thread. It
 * calls dispatch.c (dispatch.h) for every request frame. */
#ifndef DSC_SERVER_TCP_H
#define DSC_SERVER_TCP_H

#include "server_core.h"

#include <uv.h>

/* accept_poll's callback: accepts and deals the sockets to the loops in turn; out of
 * descriptors, sheds the waiting connections and backs off (accept_timer) instead of spinning. */
void dsc__tcp_on_acceptable(uv_poll_t *poll, int status, int events);
/* accept_timer's callback: accepting resumes. */
void dsc__tcp_on_accept_timer(uv_timer_t *timer);
/* tick's callback (every DSC_TCP_TICK_MS): header and idle time-outs, and connections paused by
 * the server-wide bound read again once it allows. */
#define DSC_TCP_TICK_MS 100
void dsc__tcp_on_tick(uv_timer_t *timer);
/* fair_timer's callback (--send-rate): the budget allows more of the queued answers. */
void dsc__tcp_on_fair_timer(uv_timer_t *timer);
/* On the loop's wake: writes the pieces another loop's service took off the server's queue for
 * this loop's connections (--send-rate). */
void dsc__tcp_fair_inbox(dsc_srv_loop_t *lc);
/* The most event loops (--threads). */
#define DSC_TCP_MAX_LOOPS 1024
/* Serves a socket that another loop accepted. Takes the fd. */
void dsc__tcp_adopt(dsc_srv_loop_t *lc, int fd);
/* Stop: every connection stops reading and closes once its in-flight answers are sent. */
void dsc__tcp_drain(dsc_srv_loop_t *lc);
/* Drain timeout: closes every connection now. */
void dsc__tcp_close_all(dsc_srv_loop_t *lc);

/* Once a stopping loop has no connections left and no GET waiting on a load (the catalog's I/O
 * threads deliver to its mailbox until then): closes its wake and timer handles (and the
 * sockets still handed to it), so that uv_run returns. */
void dsc__loop_maybe_finish(dsc_srv_loop_t *lc);

/* Bytes of server memory one idle TCP connection holds: its structure and the receive buffer it
 * gets once bytes arrive (a larger frame grows it while it is received). For sizing a server's
 * fan-in (tests/sim/scale_sim.c, docs/scale.md). */
size_t dsc__tcp_conn_footprint(void);

#endif
