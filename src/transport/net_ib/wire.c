/*
 * The checks of the IB wire format (wire.h): each runs on what a peer sent before anything
 * else reads it, and names the peer in its WARN.
 */
#include "wire.h"
#include "conn_stage.h"

ncclResult_t railnetIbCheckHandle(const struct ncclIbHandle* h) {
  char a[SOCKET_NAME_MAXLEN];
  NCCLCHECK(railnetConnCheckMagic("NET/IB", "IB", h->handleMagic, RAILNET_IB_HANDLE_MAGIC));
  if (!railnetSocketAddrUsable(&h->connectAddr, a)) {
    WARN("NET/IB : connect handle is invalid (address %s)", a);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t railnetIbCheckMetadata(const struct ncclIbConnectionMetadata* m, const char* peer, int wantNqps) {
  if (m->magic != RAILNET_IB_META_MAGIC || m->version != RAILNET_IB_META_VERSION) {
    WARN("NET/IB : peer %s sent connection metadata that is not railnet's (magic 0x%016llx version %u; expected "
         "0x%016llx version %u): another plugin or version at the other end, or not an NCCL peer",
         peer, (unsigned long long)m->magic, m->version, (unsigned long long)RAILNET_IB_META_MAGIC,
         RAILNET_IB_META_VERSION);
    return ncclRemoteError;
  }
  if (m->ndevs < 1 || m->ndevs > NCCL_IB_MAX_DEVS_PER_NIC || m->nqps < 1 || m->nqps > NCCL_IB_MAX_QPS ||
      (wantNqps > 0 && m->nqps != wantNqps) || (m->splitDataOnQps != 0 && m->splitDataOnQps != 1) || m->tc < 0 ||
      m->tc > 255 || m->sl < 0 || m->sl > 15 || m->fifoAddr == 0) {
    WARN("NET/IB : peer %s sent invalid connection metadata: %d devices (1..%d), %d QPs (1..%d%s), split %d, tc %d, "
         "sl %d, address 0x%llx",
         peer, m->ndevs, NCCL_IB_MAX_DEVS_PER_NIC, m->nqps, NCCL_IB_MAX_QPS, wantNqps > 0 ? ", as many as ours" : "",
         m->splitDataOnQps, m->tc, m->sl, (unsigned long long)m->fifoAddr);
    return ncclRemoteError;
  }
  for (int i = 0; i < m->ndevs; i++) {
    const struct ncclIbDevInfo* d = &m->devs[i];
    if ((d->linkLayer != IBV_LINK_LAYER_INFINIBAND && d->linkLayer != IBV_LINK_LAYER_ETHERNET) ||
        d->mtu < IBV_MTU_256 || d->mtu > IBV_MTU_4096 || d->fifoRkey == 0) {
      WARN("NET/IB : peer %s sent invalid metadata for its device %d: link layer %d, mtu %d, rkey 0x%x", peer, i,
           d->linkLayer, d->mtu, d->fifoRkey);
      return ncclRemoteError;
    }
  }
  /* a pooled ring comes later (its address 0 in the receiver's answer); a sender's credit words must be there */
  int noAddrOk = wantNqps > 0 && (m->devs[0].flags & RAILNET_IB_FLAG_EAGER_POOL);
  if ((m->devs[0].flags & RAILNET_IB_FLAG_EAGER_ANY) &&
      (m->eagerSize < 1 || m->eagerSize > RAILNET_IB_EAGER_MAX_BYTES || (m->eagerAddr == 0 && !noAddrOk))) {
    WARN("NET/IB : peer %s sent invalid eager settings: %u bytes (1..%d), address 0x%llx", peer, m->eagerSize,
         RAILNET_IB_EAGER_MAX_BYTES, (unsigned long long)m->eagerAddr);
    return ncclRemoteError;
  }
  int badRkey = 0;
  for (int i = 0; i < m->ndevs; i++) badRkey |= m->foRecRkeys[i] == 0;
  if ((m->devs[0].flags & RAILNET_IB_FLAG_FO_RECORDS) && (m->foRecAddr == 0 || badRkey)) {
    WARN("NET/IB : peer %s announced failover completion records without an address (0x%llx) or an rkey for each of "
         "its %d devices", peer, (unsigned long long)m->foRecAddr, m->ndevs);
    return ncclRemoteError;
  }
  for (int q = 0; q < m->nqps; q++) {
    if (m->qpInfo[q].devIndex < 0 || m->qpInfo[q].devIndex >= m->ndevs || m->qpInfo[q].qpn == 0 ||
        m->qpInfo[q].qpn > 0xffffff) {
      WARN("NET/IB : peer %s sent invalid metadata for QP %d: qpn %u on device %d of %d", peer, q, m->qpInfo[q].qpn,
           m->qpInfo[q].devIndex, m->ndevs);
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

ncclResult_t railnetIbFifoTake(const volatile struct ncclIbSendFifo* slots, uint64_t pos,
                               const union ncclSocketAddress* peerAddr, struct ncclIbSendFifo* copy, int* nreqsOut) {
  *nreqsOut = 0;
  uint64_t idx = pos + 1;
  if (slots[0].idx != idx) return ncclSuccess; /* the receiver has not posted it yet */
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  uint32_t nreqs = slots[0].nreqs;
  char peer[SOCKET_NAME_MAXLEN];
  if (nreqs < 1 || nreqs > NCCL_NET_IB_MAX_RECVS) {
    WARN("NET/IB : peer %s posted a receive of %u buffers (1..%d) at fifo position %llu",
         ncclSocketToString(peerAddr, peer, 1), nreqs, NCCL_NET_IB_MAX_RECVS, (unsigned long long)pos);
    return ncclRemoteError;
  }
  /* one RDMA write carries all entries of the slot, but their bytes may land in any order */
  for (uint32_t r = 1; r < nreqs; r++)
    if (slots[r].idx != idx) return ncclSuccess;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  /* from here on only the copy is read: the fifo is the peer's to write at any time */
  for (uint32_t r = 0; r < nreqs; r++) {
    copy[r].addr = slots[r].addr;
    copy[r].size = slots[r].size;
    for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++) copy[r].rkeys[d] = slots[r].rkeys[d];
    copy[r].nreqs = slots[r].nreqs;
    copy[r].tag = slots[r].tag;
    copy[r].idx = slots[r].idx;
  }
  for (uint32_t r = 0; r < nreqs; r++) {
    if (copy[r].nreqs != nreqs || copy[r].idx != idx) {
      WARN("NET/IB : peer %s posted inconsistent clear-to-send entries at fifo position %llu: entry 0 announces %u "
           "buffers, entry %u announces %u (position %llu)",
           ncclSocketToString(peerAddr, peer, 1), (unsigned long long)pos, nreqs, r, copy[r].nreqs,
           (unsigned long long)copy[r].idx - 1);
      return ncclRemoteError;
    }
  }
  *nreqsOut = (int)nreqs;
  return ncclSuccess;
}

ncclResult_t railnetIbFifoMatch(const struct ncclIbSendFifo* entries, int nreqs, const int* taken, int remDevs,
                                size_t size, int tag, const union ncclSocketAddress* peerAddr, int* match) {
  *match = -1;
  char peer[SOCKET_NAME_MAXLEN];
  for (int r = 0; r < nreqs; r++) {
    if (taken[r] || entries[r].tag != (uint32_t)tag) continue;
    if (size > entries[r].size) {
      WARN("NET/IB : peer %s: message of %zu bytes (tag %x) but the receive posted for it has %llu bytes: receive "
           "smaller than send (req %d/%d)",
           ncclSocketToString(peerAddr, peer, 1), size, tag, (unsigned long long)entries[r].size, r, nreqs);
      return ncclInvalidUsage;
    }
    /* rkeys are per device of the receiver's vDevice */
    int badKey = 0;
    for (int d = 0; d < remDevs && d < NCCL_IB_MAX_DEVS_PER_NIC; d++) badKey |= entries[r].rkeys[d] == 0;
    if (size > 0 && (entries[r].addr == 0 || badKey)) {
      WARN("NET/IB : req %d/%d tag %x peer %s posted incorrect receive info: size %llu addr %llx rkeys[0]=%x", r,
           nreqs, tag, ncclSocketToString(peerAddr, peer, 1), (unsigned long long)entries[r].size,
           (unsigned long long)entries[r].addr, entries[r].rkeys[0]);
      return ncclRemoteError;
    }
    *match = r;
    return ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t railnetIbCheckRecvSizes(const size_t* posted, const int* reported, int n,
                                     const union ncclSocketAddress* peerAddr) {
  for (int i = 0; i < n; i++) {
    if (reported[i] >= 0 && (size_t)reported[i] <= posted[i]) continue;
    char peer[SOCKET_NAME_MAXLEN];
    WARN("NET/IB : peer %s reported %d bytes written into receive buffer %d/%d of %zu bytes: the peer is broken or "
         "not railnet's (every rank must load the same plugin); the data of this receive cannot be trusted",
         ncclSocketToString(peerAddr, peer, 1), reported[i], i, n, posted[i]);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

ncclResult_t railnetIbCheckFoMsg(const struct railnetIbFoMsg* m, int nqps, const char* peer) {
  const char* bad = NULL;
  if (m->magic != RAILNET_IB_FO_MAGIC)
    bad = "a failover message without its magic";
  else if (m->type < RAILNET_IB_FO_NOTIFY || m->type > RAILNET_IB_FO_PROBE_ACK)
    bad = "a failover message of an unknown type";
  else if (m->nEntries > RAILNET_IB_FIFO_SLOTS)
    bad = "a failover state with more entries than fifo slots";
  for (int q = nqps; bad == NULL && q < NCCL_IB_MAX_QPS; q++)
    if (m->deadQps[q / 64] & (1ull << (q % 64))) bad = "a failover message naming a QP the comm does not have";
  int probe = m->type >= RAILNET_IB_FO_PROBE_REQ;
  for (uint32_t e = 0; bad == NULL && m->type >= RAILNET_IB_FO_RECOVER_REQ && e < m->nEntries; e++) {
    uint64_t id = m->entries[e].id;
    if (m->entries[e].missing > 0xffffff) bad = "a recovery or probe message with a QP number beyond 24 bits";
    else if (!probe && id >= (uint64_t)nqps) bad = "a recovery message naming a QP the comm does not have";
    else if (probe && (id > 0xffff || (id & 0xff) >= NCCL_IB_MAX_DEVS_PER_NIC || (id >> 8) >= NCCL_IB_MAX_DEVS_PER_NIC))
      bad = "a probe message naming a device the comm does not have";
  }
  if (bad == NULL) return ncclSuccess;
  WARN("NET/IB : peer %s sent %s (type %u, %u entries): the peer is broken or not railnet's", peer, bad, m->type,
       m->nEntries);
  return ncclRemoteError;
}
