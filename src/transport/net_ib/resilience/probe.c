/*
 * Path probes of a failover comm (failover.h): a path that drops every packet while both of
 * its ports stay ACTIVE raises no port event; its data QPs notice only after their retry
 * time (34 s at NCCL's defaults, 137 s at NCCL_IB_TIMEOUT=22), and a clear-to-send lost on it
 * leaves the sender waiting that long. So the sender keeps, per device, a QP of its own
 * connected to the receiver's device that its data QPs use, with a short ACK timeout, and
 * writes nothing to it (an empty RDMA write, acknowledged by the receiver's NIC: no CPU of
 * the receiver involved) every RAILNET_IB_PATH_PROBE_INTERVAL ms while the comm is in use.
 * A probe that runs out of retries fails its device over (failover_state.c).
 */
#include <stdio.h>
#include <string.h>
#include "failover.h"
#include "debug.h"
#include "../devices.h"
#include "ibvwrap.h"
#include "../qp.h"
#include "socket.h"

enum { PROBE_NONE = 0, PROBE_WAIT_ACK, PROBE_READY, PROBE_OFF };

/* The peer's device that this side's device d talks to (that of its first QP), -1 if none. */
static int peerDevOf(struct ncclIbNetCommBase* base, int d) {
  for (int q = 0; q < base->nqps; q++)
    if (base->qps[q].devIndex == d) return base->qps[q].remDevIndex;
  return -1;
}

static void probesOff(struct ncclIbNetCommBase* base, const char* why) {
  char peer[SOCKET_NAME_MAXLEN];
  INFO(NCCL_NET, "NET/IB : %s comm with %s: no path probes (%s): a path that drops packets is noticed after the "
       "data QPs' retry time", base->isSend ? "send" : "receive", railnetIbPeerStr(base, peer), why);
  base->fo->probeState = PROBE_OFF;
}

static ncclResult_t setup(struct ncclIbSendComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  struct railnetIbFoMsg m;
  memset(&m, 0, sizeof(m));
  m.type = RAILNET_IB_FO_PROBE_REQ;
  for (int d = 0; d < base->vProps.ndevs; d++) {
    int rd = peerDevOf(base, d);
    if (rd < 0) continue;
    if (railnetIbQpCreate(base, d, &fo->probeQps[d]) != ncclSuccess) {
      probesOff(base, "a probe QP could not be created");
      return ncclSuccess;
    }
    m.entries[m.nEntries].id = (uint64_t)(d | (rd << 8));
    m.entries[m.nEntries].missing = fo->probeQps[d]->qp_num;
    m.nEntries++;
  }
  NCCLCHECK(railnetIbFoSend(base, &m, "path probe request"));
  fo->probeState = PROBE_WAIT_ACK;
  return ncclSuccess;
}

ncclResult_t railnetIbProbeAnswer(struct ncclIbSendComm* comm, const struct railnetIbFoMsg* m) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  int renewals = 0;
  for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++) renewals += fo->probeRenew[d];
  if (fo->probeState != PROBE_WAIT_ACK && renewals == 0) {
    char peer[SOCKET_NAME_MAXLEN];
    WARN("NET/IB : %s answered a path probe request that was not made: the peer is broken", railnetIbPeerStr(base, peer));
    return railnetIbFoFail(base);
  }
  for (uint32_t e = 0; e < m->nEntries; e++) {
    int d = (int)(m->entries[e].id & 0xff), rd = (int)(m->entries[e].id >> 8);
    if (fo->probeState != PROBE_WAIT_ACK && (d >= base->vProps.ndevs || !fo->probeRenew[d])) continue;
    if (d >= base->vProps.ndevs || rd >= base->nRemDevs || fo->probeQps[d] == NULL ||
        railnetIbQpConnectTimed(base, d, fo->probeQps[d], rd, (uint32_t)m->entries[e].missing, fo->probeTimeout,
                                fo->probeRetryCnt) != ncclSuccess) {
      probesOff(base, "the receiver's probe QPs could not be connected");
      return ncclSuccess;
    }
    fo->probeFailed[d] = 0;
    fo->probeInFlight[d] = 0;
    fo->probeRenew[d] = 0;
  }
  fo->probeState = PROBE_READY;
  return ncclSuccess;
}

ncclResult_t railnetIbProbeRecv(struct ncclIbRecvComm* comm, const struct railnetIbFoMsg* m) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  struct railnetIbFoMsg ack;
  memset(&ack, 0, sizeof(ack));
  ack.type = RAILNET_IB_FO_PROBE_ACK;
  for (uint32_t e = 0; e < m->nEntries; e++) {
    int sd = (int)(m->entries[e].id & 0xff), d = (int)(m->entries[e].id >> 8);
    /* a probe QP asked for again (its device came back through port recovery) replaces the
     * old one: one probe QP per device at any time */
    if (d < base->vProps.ndevs && fo->probeQps[d] != NULL) {
      railnetIbFoRetireQp(fo, fo->probeQps[d]);
      fo->probeQps[d] = NULL;
    }
    if (d >= base->vProps.ndevs || sd >= base->nRemDevs) {
      char peer[SOCKET_NAME_MAXLEN];
      WARN("NET/IB : %s sent a path probe request for devices %d -> %d of a comm of %d -> %d devices: the peer is "
           "broken", railnetIbPeerStr(base, peer), sd, d, base->nRemDevs, base->vProps.ndevs);
      return railnetIbFoFail(base);
    }
    if (railnetIbQpCreate(base, d, &fo->probeQps[d]) != ncclSuccess ||
        railnetIbQpConnect(base, d, fo->probeQps[d], sd, (uint32_t)m->entries[e].missing) != ncclSuccess)
      continue; /* that path is not probed: the sender's connect of it fails, it turns probes off */
    ack.entries[ack.nEntries] = m->entries[e];
    ack.entries[ack.nEntries].missing = fo->probeQps[d]->qp_num;
    ack.nEntries++;
  }
  return railnetIbFoSend(base, &ack, "path probe answer");
}

ncclResult_t railnetIbProbeRenew(struct ncclIbSendComm* comm, int d) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  int rd = peerDevOf(base, d);
  if (fo->probeIntervalMs == 0 || fo->probeState != PROBE_READY || fo->probeQps[d] == NULL || rd < 0 ||
      fo->probeRenew[d])
    return ncclSuccess; /* probes off, not set up yet (setup() makes one for every device), or asked already */
  railnetIbFoRetireQp(fo, fo->probeQps[d]);
  fo->probeQps[d] = NULL;
  fo->probeFailed[d] = 1; /* until the receiver connected the new one */
  fo->probeInFlight[d] = 0;
  if (railnetIbQpCreate(base, d, &fo->probeQps[d]) != ncclSuccess) {
    probesOff(base, "a new probe QP for a recovered device could not be created");
    return ncclSuccess;
  }
  struct railnetIbFoMsg m;
  memset(&m, 0, sizeof(m));
  m.type = RAILNET_IB_FO_PROBE_REQ;
  m.entries[0].id = (uint64_t)(d | (rd << 8));
  m.entries[0].missing = fo->probeQps[d]->qp_num;
  m.nEntries = 1;
  NCCLCHECK(railnetIbFoSend(base, &m, "path probe request"));
  fo->probeRenew[d] = 1; /* the other devices keep their probes meanwhile */
  return ncclSuccess;
}

static ncclResult_t post(struct ncclIbSendComm* comm, int d) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE; /* empty: nothing lands, the receiver's NIC acknowledges it */
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr_id = railnetIbWrIdFoProbe(d);
  wr.wr.rdma.remote_addr = comm->remSizesAddr;
  wr.wr.rdma.rkey = comm->remSizesRkeys[peerDevOf(base, d)];
  if (wrap_ibv_post_send(fo->probeQps[d], &wr, &bad) != ncclSuccess) {
    fo->probeFailed[d] = 1; /* its QP failed: the data QPs of the device tell from now on */
    return ncclSuccess;
  }
  fo->probeInFlight[d] = 1;
  base->work.wrs++;
  return ncclSuccess;
}

ncclResult_t railnetIbProbeSendStep(struct ncclIbSendComm* comm, uint64_t now) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  if (fo->probeIntervalMs == 0 || fo->probeState == PROBE_OFF || fo->probeState == PROBE_WAIT_ACK) return ncclSuccess;
  if (fo->probeState == PROBE_NONE) return setup(comm);
  for (int d = 0; d < base->vProps.ndevs; d++) {
    if (fo->probeQps[d] == NULL || fo->probeFailed[d] || fo->probeRenew[d] || !railnetIbQpDevInUse(base, d)) continue;
    if (fo->probeInFlight[d]) { /* its completion may be all that moves on this device */
      int n = 0;
      NCCLCHECK(fo->poll(base, d, &n));
    } else if (now >= fo->probeNs) {
      NCCLCHECK(post(comm, d));
    }
  }
  if (now >= fo->probeNs) fo->probeNs = now + (uint64_t)fo->probeIntervalMs * 1000000ull;
  return ncclSuccess;
}
