/* What the IB sender reads from its peer during the data path: the clear-to-send entries
 * the receiver RDMA-writes into the sender's fifo (railnetIbFifoTake copies and checks a
 * slot once, railnetIbFifoMatch picks an entry for each isend from that copy, before the
 * entries' addresses and keys are used), and, on the receiving side, the sizes a sender
 * reports for a receive (railnetIbCheckRecvSizes, run by test).
 * Input: a parameter block (flags, mask of entries already taken, the receiver's device
 * count, message size, tag, fifo position, posted/reported sizes), then 8 fifo entries
 * (their raw bytes). Flags bit 0 makes the entries consistent first (idx = position + 1
 * and the same nreqs in all), so that the fuzzer reaches the size, tag and key checks. */
#include "fuzz_common.h"
#include "../src/transport/net_ib/wire.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  return 0;
}

struct params {
  uint8_t flags;
  uint8_t takenMask;
  uint8_t ndevs;
  uint8_t n;
  uint32_t tag;
  uint64_t pos;
  uint64_t size;
  uint32_t posted[NCCL_NET_IB_MAX_RECVS];
  int32_t reported[NCCL_NET_IB_MAX_RECVS];
};

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static struct ncclIbSendFifo slots[NCCL_NET_IB_MAX_RECVS];
  struct params p;
  memset(&p, 0, sizeof(p));
  memcpy(&p, data, size < sizeof(p) ? size : sizeof(p));
  size_t rest = size > sizeof(p) ? size - sizeof(p) : 0;
  memset(slots, 0, sizeof(slots));
  memcpy(slots, data + (size - rest), rest < sizeof(slots) ? rest : sizeof(slots));
  if (p.flags & 1) {
    uint32_t nreqs = slots[0].nreqs % (NCCL_NET_IB_MAX_RECVS + 1);
    for (int r = 0; r < NCCL_NET_IB_MAX_RECVS; r++) {
      slots[r].idx = p.pos + 1;
      slots[r].nreqs = nreqs;
    }
  }
  int taken[NCCL_NET_IB_MAX_RECVS];
  for (int r = 0; r < NCCL_NET_IB_MAX_RECVS; r++) taken[r] = (p.takenMask >> r) & 1;
  int ndevs = 1 + p.ndevs % NCCL_IB_MAX_DEVS_PER_NIC;
  size_t msg = (p.flags & 2) ? (size_t)(p.size % (1u << 24)) : (size_t)p.size;
  union ncclSocketAddress peer;
  memset(&peer, 0, sizeof(peer));
  peer.sin.sin_family = AF_INET;
  peer.sin.sin_port = htons(4242);
  struct ncclIbSendFifo copy[NCCL_NET_IB_MAX_RECVS];
  int nreqs = -1;
  ncclResult_t r = railnetIbFifoTake(slots, p.pos, &peer, copy, &nreqs);
  if (r != ncclSuccess) {
    FUZZ_CHECK(r == ncclRemoteError && nreqs == 0, "take gave %d, nreqs %d", (int)r, nreqs);
  } else if (nreqs > 0) {
    FUZZ_CHECK(nreqs <= NCCL_NET_IB_MAX_RECVS, "nreqs %d", nreqs);
    for (int e = 0; e < nreqs; e++)
      FUZZ_CHECK(copy[e].idx == p.pos + 1 && copy[e].nreqs == (uint32_t)nreqs, "entry %d idx %llu nreqs %u", e,
                 (unsigned long long)copy[e].idx, copy[e].nreqs);
    /* the peer rewrites its fifo now: the copy is what the isends use */
    memset(slots, 0xff, sizeof(slots));
    int match = -2;
    r = railnetIbFifoMatch(copy, nreqs, taken, ndevs, msg, (int)p.tag, &peer, &match);
    if (r == ncclSuccess && match >= 0) {
      FUZZ_CHECK(match < nreqs, "match %d of %d", match, nreqs);
      FUZZ_CHECK(!taken[match], "entry %d taken", match);
      FUZZ_CHECK(copy[match].tag == p.tag, "tag %u for %u", copy[match].tag, p.tag);
      FUZZ_CHECK(copy[match].size >= msg, "entry of %llu bytes for %zu", (unsigned long long)copy[match].size, msg);
      if (msg > 0) {
        FUZZ_CHECK(copy[match].addr != 0, "no address");
        for (int d = 0; d < ndevs; d++) FUZZ_CHECK(copy[match].rkeys[d] != 0, "no rkey for the receiver's device %d", d);
      }
    } else if (r == ncclSuccess) {
      FUZZ_CHECK(match == -1, "match %d", match);
    } else {
      FUZZ_CHECK(r == ncclRemoteError || r == ncclInvalidUsage, "match gave %d", (int)r);
    }
  } else {
    FUZZ_CHECK(nreqs == 0, "nreqs %d", nreqs);
  }
  /* the receiver's side: reported sizes against posted ones */
  int n = 1 + p.n % NCCL_NET_IB_MAX_RECVS;
  size_t posted[NCCL_NET_IB_MAX_RECVS];
  for (int i = 0; i < n; i++) posted[i] = p.posted[i];
  r = railnetIbCheckRecvSizes(posted, p.reported, n, &peer);
  int ok = 1;
  for (int i = 0; i < n; i++) ok &= p.reported[i] >= 0 && (size_t)p.reported[i] <= posted[i];
  FUZZ_CHECK((r == ncclSuccess) == ok, "sizes check gave %d, expected %s", (int)r, ok ? "success" : "an error");
  return 0;
}
