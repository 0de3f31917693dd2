/* Test-only fake libibverbs (libfakeverbs.so): the knobs tests use beside the verbs API. Loaded
 * through DSC_IBVERBS_LIB; never installed, never linked into a shipped binary. */
#ifndef DSC_FAKEVERBS_H
#define DSC_FAKEVERBS_H

/* Environment read when a device is opened (each ibv_open_device / ibv_get_device_list):
 *   DSC_FAKEVERBS_DEVICES=0        no device at all (default 1: "fakeverbs0")
 *   DSC_FAKEVERBS_MTU=BYTES        the port's active MTU, 256..4096 (default 4096)
 *   DSC_FAKEVERBS_PORT=down        the port is DOWN (default ACTIVE)
 *   DSC_FAKEVERBS_MAX_MR_SIZE=N    device max_mr_size in bytes (default 2^40)
 *   DSC_FAKEVERBS_GID_LOOPBACK=off GID 2 (the one on 127.0.0.0/8) is an empty entry: no GID is
 *                                  on the TCP connections' subnet, only the decoy is routable
 *   DSC_FAKEVERBS_MW=off           no memory windows: device_cap_flags lacks MEM_WINDOW and
 *                                  TYPE_2B and ibv_alloc_mw fails with EOPNOTSUPP (default: type-2
 *                                  windows, bound with IBV_WR_BIND_MW, freed by IBV_WR_LOCAL_INV)
 *   DSC_FAKEVERBS_MEMLOCK=N        bytes a process may register in all (default unlimited);
 *                                  beyond it ibv_reg_mr fails with ENOMEM as a real device does
 *   DSC_FAKEVERBS_DIR=DIR          serve remote READs on DIR/fv-<pid>.sock (works across network
 *                                  namespaces) instead of the abstract socket @dsc-fakeverbs-<pid>
 *   DSC_FAKEVERBS_FAULTS=SPEC      fault injection, comma-separated, counts from 1:
 *       drop_cqe=N      the Nth completion this process would queue is lost
 *       fail_post=N     the Nth ibv_post_send fails with ENOMEM (*bad_wr = the first WR)
 *       kill_on_read=N  this process kills itself (SIGKILL) when asked to serve its Nth READ:
 *                       the requester sees the peer die mid-transfer (IBV_WC_RETRY_EXC_ERR)
 *       qp_delay_ms=N   every ibv_create_qp takes N ms (a NIC whose firmware is slow to answer)
 *   DSC_FAKEVERBS_PORT_CTL=FILE    port events on demand: FILE is read every 10 ms and each
 *                                  change of its first word raises one async event: "down"
 *                                  PORT_ERR, "active" PORT_ACTIVE, "gid..." GID_CHANGE, "fatal"
 *                                  DEVICE_FATAL (ibv_query_port's answer does not change)
 *   DSC_FAKEVERBS_STATS=FILE       at exit (read then), append one line to FILE:
 *       "fakeverbs pid P reg_mr N max_qp_read_requests M bind_mw B local_inv I"
 *                       N: ibv_reg_mr calls of the process (successful or not); M: the most READ
 *                       requests (signalled WRs: a chain signals only its last) posted and not
 *                       yet completed on one QP at once; B, I: windows bound and invalidated
 *                       successfully. A process killed by a signal writes none.
 *
 * Async events behave as libibverbs': the async fd turns readable per queued event; an event read
 * with ibv_get_async_event and not yet acknowledged keeps its QP alive (ibv_destroy_qp waits for
 * the ack), and events not read yet are dropped when their QP is destroyed. A READ that breaks
 * the rkey, access or bounds checks raises IBV_EVENT_QP_ACCESS_ERR on the responder's QP, one with
 * the wrong path MTU IBV_EVENT_QP_REQ_ERR.
 *
 * Memory windows (type 2, as type 2A/2B on a NIC): ibv_alloc_mw hands out a free window; an
 * IBV_WR_BIND_MW on a QP in RTS binds it (in order with that QP's other WRs, completing
 * IBV_WC_BIND_MW, or IBV_WC_MW_BIND_ERR moving the QP to ERR) to a range of a region registered
 * with IBV_ACCESS_MW_BIND; from then on its rkey READs that range, and only through that QP: a
 * READ under it on another QP, outside the range, or after IBV_WR_LOCAL_INV (or after that QP is
 * destroyed, or the window deallocated) is a remote access error, exactly as an rkey that names
 * nothing. A region registered without IBV_ACCESS_REMOTE_READ grants no READ under its own rkey.
 *
 * Addressing: the port's GID table (4 entries, all RoCE v2 in ibv_query_gid_ex):
 *   0  fe80::<pid>            link-local (real ports list one): never to be chosen
 *   1  ::ffff:10.254.Y.Z      a DECOY: routable, but on no local interface (Y.Z: the low 16 bits
 *                             of the pid), as a second RoCE netdev's GID on another network
 *   2  ::ffff:127.X.Y.Z       X.Y.Z is the process id (24 bits): on 127.0.0.0/8 (lo), the
 *                             subnet of every 127.0.0.1 TCP connection, so the GID that a real
 *                             setup exchanges names the process whose memory a READ reaches
 *   3  empty (ENODATA)
 * Traffic to a GID that names no fake NIC (link-local, decoy, anything not 127.X.Y.Z) ends in
 * IBV_WC_RETRY_EXC_ERR, as across a routed network; a QP whose peer sent from such a GID never
 * answers either. ibv_create_ah accepts sgid_index 0-2 towards a routable destination, and fails
 * with EINVAL for any other index or a link-local (or zero) destination. */

/* Replaces the fault counters of this process (same syntax as DSC_FAKEVERBS_FAULTS; NULL or ""
 * clears them). Returns 0, or -1 for a spec it does not understand. */
int fakeverbs_set_faults(const char *spec);

#endif
