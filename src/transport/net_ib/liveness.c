/*
 * Peer liveness of an IB comm (liveness.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "liveness.h"
#include "debug.h"
#include "devices.h"
#include "resilience/failover.h"
#include "ibvwrap.h"
#include "qp.h"
#include "socket.h"

#define PORT_LOOK_NS 1000000000ull     /* a port is queried once a second of data path calls */
#define PORT_DOWN_LOOK_NS 100000000ull /* ... every 100 ms while one of them is down */

ncclResult_t railnetIbPeerCheck(struct ncclIbNetCommBase* base, const char* during) {
  /* the call's railnetIbDevicesCheck counted it: the clock only when that one was due too */
  if (base->clockCalls % RAILNET_IB_CLOCK_CALLS != 0) return ncclSuccess;
  uint64_t now = railnetClockNs();
  if (now < base->peerLookNs) return ncclSuccess;
  base->peerLookNs = now + RAILNET_IB_PEER_LOOK_MS * 1000000ull;
  /* with failover its messages are read off the socket by failover_msg.c, which sees the end */
  int err = 0;
  int gone = base->sockClosed || railnetSocketPeerGone(&base->sock, &err);
  if (!gone) return ncclSuccess;
  if (base->peerGoneNs == 0) base->peerGoneNs = now;
  if (err) base->peerErr = err; /* the next look reads an end of stream: keep why it ended */
  char peer[SOCKET_NAME_MAXLEN];
  if (base->peerErr == ETIMEDOUT) {
    WARN("NET/IB : %s stopped answering on this %s comm's connection while this side waited in %s(): nothing it "
         "sent was acknowledged for RAILNET_SOCKET_TIMEOUT_MSEC=%lld ms (TCP keepalive). Its host is down, rebooted "
         "or unreachable (a link or switch between the hosts): check that host and the path to it; this comm fails",
         railnetIbPeerStr(base, peer), base->isSend ? "send" : "receive", during,
         (long long)railnetSocketPeerTimeoutMs());
    railnetIbCommFail(base);
    return ncclRemoteError;
  }
  if (now - base->peerGoneNs < RAILNET_IB_PEER_GRACE_MS * 1000000ull) return ncclSuccess;
  WARN("NET/IB : %s closed its connection to this %s comm while this side waited in %s(): its process exited or "
       "crashed, or its comm failed or was closed. Look at that rank's log (NCCL_DEBUG=WARN) for the first error; "
       "this comm fails",
       railnetIbPeerStr(base, peer), base->isSend ? "send" : "receive", during);
  railnetIbCommFail(base);
  return ncclRemoteError;
}

/* Whether one of the last QP events of device d names a QP of this comm (*qpn: which). */
static int ownQpEvent(struct ncclIbNetCommBase* base, int d, uint32_t* qpn) {
  struct ncclIbCommDev* cd = &base->devs[d];
  struct ncclIbStats* st = &ncclIbDevs[cd->ibDevN].stats;
  uint32_t now = __atomic_load_n(&st->qpErrors, __ATOMIC_ACQUIRE), k = cd->qpErrSeen;
  if (now == k) return 0;
  if (now - k > RAILNET_IB_QP_EVENTS) k = now - RAILNET_IB_QP_EVENTS; /* older ones were overwritten */
  cd->qpErrSeen = now;
  for (; k != now; k++) {
    uint32_t n = __atomic_load_n(&st->qpErrorNums[k % RAILNET_IB_QP_EVENTS], __ATOMIC_RELAXED);
    for (int q = 0; q < base->nqps; q++)
      if (base->qps[q].devIndex == d && base->qps[q].qp && base->qps[q].qp->qp_num == n) *qpn = n;
    if (cd->flushQp && cd->flushQp->qp_num == n) *qpn = n;
  }
  return *qpn != 0;
}

/* Device d cannot carry the comm any more: failover takes it, or the comm fails. */
static ncclResult_t deviceGone(struct ncclIbNetCommBase* base, int d, const char* cause, const char* fix) {
  if (base->fo && railnetIbFoPortGone(base, d, cause)) return ncclSuccess;
  struct ncclIbDev* dev = &ncclIbDevs[base->devs[d].ibDevN];
  char peer[SOCKET_NAME_MAXLEN];
  WARN("NET/IB : %s:%d of the %s comm with %s: %s; the comm fails. %s", dev->devName, dev->portNum,
       base->isSend ? "send" : "receive", railnetIbPeerStr(base, peer), cause, fix);
  railnetIbCommFail(base);
  return ncclRemoteError;
}

#define PORT_FIX "Check the cable, the switch port and ibv_devinfo / ip link on this host"
#define PORT_FIX_FAILOVER                                                                                   \
  PORT_FIX "; to survive the loss of one port of a fused NIC set NCCL_IB_RESILIENCY_PORT_FAILOVER=1 on every " \
           "rank"

/* Port of device d not ACTIVE: with failover the device goes at once. Without, a port that is
 * DOWN (its link went down: its QPs' requests fail) fails the comm at once too, as NCCL fails
 * comms on a fatal port event; one in another state (INIT or ARMED: the subnet manager
 * configuring it again) may come back within the QPs' retry time, so the comm fails then. */
static ncclResult_t portNotActive(struct ncclIbNetCommBase* base, int d, enum ibv_port_state st, uint64_t now) {
  struct ncclIbCommDev* cd = &base->devs[d];
  struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
  char cause[128];
  if (st == IBV_PORT_DOWN)
    snprintf(cause, sizeof(cause), "its port is DOWN now (its link went down)");
  else
    snprintf(cause, sizeof(cause), "its port is not ACTIVE now (state %d)", st);
  if (base->fo) return deviceGone(base, d, cause, PORT_FIX);
  if (st == IBV_PORT_DOWN) return deviceGone(base, d, cause, PORT_FIX_FAILOVER);
  uint64_t bound = railnetIbRetryTimeNs();
  if (cd->portDownNs == 0) {
    cd->portDownNs = now;
    WARN("NET/IB : %s:%d left ACTIVE while a %s comm uses it; the comm fails unless it is ACTIVE again within the "
         "QPs' retry time (%.1f s: 4.096 us x 2^NCCL_IB_TIMEOUT x (NCCL_IB_RETRY_CNT+1))",
         dev->devName, dev->portNum, base->isSend ? "send" : "receive", bound / 1e9);
    return ncclSuccess;
  }
  if (now - cd->portDownNs <= bound) return ncclSuccess;
  snprintf(cause, sizeof(cause), "its port has not been ACTIVE for %.1f s, longer than the QPs' retry time",
           (now - cd->portDownNs) / 1e9);
  return deviceGone(base, d, cause, PORT_FIX_FAILOVER);
}

ncclResult_t railnetIbDevicesCheck(struct ncclIbNetCommBase* base, const char* func) {
  uint64_t now = 0;
  int lookAll = 0, due = railnetIbClockDue(base);
  for (int d = 0; d < base->vProps.ndevs && !base->failed; d++) {
    if (!railnetIbQpDevInUse(base, d)) continue;
    struct ncclIbCommDev* cd = &base->devs[d];
    struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
    if (ncclIbStatsCheckFatalCount(&dev->stats, func) != ncclSuccess) {
      railnetIbCommFail(base);
      return ncclSystemError;
    }
    uint32_t qpn = 0;
    if (ownQpEvent(base, d, &qpn)) {
      char cause[96];
      snprintf(cause, sizeof(cause), "its QP qp_num=%u got a fatal asynchronous event (above)", qpn);
      NCCLCHECK(deviceGone(base, d, cause, "The WARN before this one names the event"));
      continue;
    }
    uint32_t pe = __atomic_load_n(&dev->stats.portErrors, __ATOMIC_ACQUIRE);
    if (pe == cd->portErrSeen && !lookAll) {
      if (!due) continue; /* the periodic look reads the clock once in RAILNET_IB_CLOCK_CALLS calls */
      if (now == 0) now = railnetClockNs();
      if (now < base->portLookNs) continue;
      lookAll = 1; /* time for the periodic look: every device of the comm */
    }
    cd->portErrSeen = pe;
    if (now == 0) now = railnetClockNs();
    struct ibv_port_attr pa;
    memset(&pa, 0, sizeof(pa));
    if (wrap_ibv_query_port(dev->context, dev->portNum, &pa) != ncclSuccess) continue;
    if (pa.state == IBV_PORT_ACTIVE) {
      if (cd->portDownNs) INFO(NCCL_NET, "NET/IB : %s:%d is ACTIVE again", dev->devName, dev->portNum);
      cd->portDownNs = 0;
      continue;
    }
    NCCLCHECK(portNotActive(base, d, pa.state, now));
  }
  if (lookAll) {
    int down = 0;
    for (int d = 0; d < base->vProps.ndevs; d++) down |= base->devs[d].portDownNs != 0;
    base->portLookNs = now + (down ? PORT_DOWN_LOOK_NS : PORT_LOOK_NS);
  }
  return ncclSuccess;
}
