/*
 * The probes behind `railnet-diag --pair` (the wire format is pairproto.h):
 *  - TCP: this host's interface addresses (with ncclFindInterfaces' choice marked), a
 *    bounded connect from one local address to a peer address and a short echo both ways;
 *    the listener and the answering side of that echo.
 *  - RDMA: the active ports x GIDs of interest (the index railnet's automatic selection picks
 *    and the other RoCE entries, asked of the IB transport through ib_explain.h), and an RC
 *    QP brought up against a peer's QP by the transport's own QP fill (ibvqp.h), with RDMA
 *    write and read of a buffer, each step bounded and classified.
 * Every call is bounded by the deadline or timeout it is given. Part of tools/diaglib, the
 * library of railnet-diag (none of it is in the plugin).
 */
#ifndef RAILNET_PAIRPROBE_H
#define RAILNET_PAIRPROBE_H
#include <infiniband/verbs.h>
#include "pairproto.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- TCP (pairtcp.c) */

/* Every IPv4 and global IPv6 address of this host's interfaces except loopback ones (a
 * peer's 127.0.0.1 would be the prober itself), with MTU, state and the choice of
 * ncclFindInterfaces marked; *n gets the count (at most max). */
ncclResult_t railnetPairListIfaces(railnetPairIface* out, int max, int* n);
/* "198.18.0.1" / "2001:db8::1" */
const char* railnetPairAddrString(int family, const uint8_t* addr, char* buf, size_t size);

/* A listening TCP socket on port (0: any) of every address (IPv6 dual-stack, else IPv4);
 * *boundPort gets the port. 0 or the errno. */
int railnetPairListen(uint16_t port, int* fd, uint16_t* boundPort);
/* connect() from the local address (bound to the local interface where the kernel allows
 * it: SO_BINDTODEVICE needs CAP_NET_RAW) to addr:port, within the deadline. *fd on success;
 * else the errno (ETIMEDOUT at the deadline). */
int railnetPairConnectFrom(const railnetPairIface* local, int family, const uint8_t* addr, uint16_t port,
                           uint64_t deadlineNs, int* fd);
/* The TCP check of one path: connect from local to peer's address on port, wait for the
 * listener's GREET with peerToken (else step GREET: the address is not the peer's, and it
 * was sent nothing), send a TCP_PROBE of `bytes` and read the echo back, all within
 * timeoutMs. Fills r. */
void railnetPairTcpProbeRun(const railnetPairIface* local, const railnetPairIface* peer, uint16_t port, int timeoutMs,
                            uint32_t bytes, uint64_t peerToken, railnetPairTcpResult* r);
/* The result of a probe not run (RAILNET_PAIR_TCP_BOUND, ETIMEDOUT): the check's bound came first. */
void railnetPairTcpNotRun(const railnetPairIface* local, const railnetPairIface* peer, railnetPairTcpResult* r);
/* The result of a probe refused (RAILNET_PAIR_TCP_SCOPE, EACCES): the address is not one this side
 * may take for the client's own (a server without a token, railnet-diag's pair_state.c). */
void railnetPairTcpOutOfScope(const railnetPairIface* local, const railnetPairIface* peer, railnetPairTcpResult* r);
/* A listener's side of the greeting: GREET with token on a just-accepted fd. 0 or the errno. */
int railnetPairGreetSend(int fd, uint64_t token, uint64_t deadlineNs);
/* The connecting side: the GREET by the deadline; 0 when its token is `token` (any token when
 * got is not NULL: *got gets it), else the errno (EPERM: other bytes or another token). */
int railnetPairAwaitGreet(int fd, uint64_t token, uint64_t deadlineNs, uint64_t* got);
/* A random non-zero token for this process's listener. */
uint64_t railnetPairNewToken(void);
/* The answering side: having read a TCP_PROBE on fd, read its bytes and send them back.
 * 0 or the errno. */
int railnetPairTcpProbeAnswer(int fd, const railnetPairTcpProbe* probe, uint64_t deadlineNs);

/* ---------------------------------------------------------------- RDMA (pairrdma.c) */

#define RAILNET_PAIR_GID_CHOSEN 1u /* isAuto bits: the index railnet uses */
#define RAILNET_PAIR_GID_FORCED 2u /* ... because NCCL_IB_GID_INDEX says so */
/* The entries of interest on this host's active ports: for each port the IB transport's
 * discovery takes (state, link layer, NCCL_IB_HCA: railnetIbExplainPortUsed), the GID index
 * its selection gives (railnetIbExplainGidIndex, which honours NCCL_IB_GID_INDEX; empty or
 * not: a forced bad index should be seen failing) and every other non-empty RoCE v1/v2
 * entry. 0 entries (and ncclSuccess) without libibverbs or devices; why says why then. */
ncclResult_t railnetPairRdmaList(railnetPairRdmaEntry* out, int max, int* n, char* why, size_t whySize);

/* One side of a probed RDMA path: a device context, PD, CQ, RC QP and a registered buffer. */
struct railnetPairRdmaSide;
/* Opens e's device and makes the QP (to INIT) and a buffer of bufBytes; *q gets what the
 * peer needs. On failure *q has step and err set and *side is NULL (the hint is logged by
 * ibvwrap). */
void railnetPairRdmaOpen(const railnetPairRdmaEntry* e, uint32_t bufBytes, struct railnetPairRdmaSide** side,
                         railnetPairRdmaQp* q);
/* Brings the QP to RTR and RTS against the peer's QP; 0, or the errno with *step set. */
int railnetPairRdmaConnect(struct railnetPairRdmaSide* s, const railnetPairRdmaQp* peer, int* step);
/* Writes `bytes` of a pattern into the peer's buffer, reads them back into a second local
 * buffer and compares, within timeoutMs. Fills r (step 0 when it worked). */
void railnetPairRdmaWriteRead(struct railnetPairRdmaSide* s, const railnetPairRdmaQp* peer, uint32_t bytes,
                              int timeoutMs, railnetPairRdmaResult* r);
void railnetPairRdmaClose(struct railnetPairRdmaSide* s);
/* The hint for an RDMA failure at step with err (GID, rail/route, memlock, firewall...). */
const char* railnetPairRdmaHint(int step, int err);

#ifdef __cplusplus
}
#endif
#endif
