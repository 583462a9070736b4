/* Port failover's messages, as a peer sends them over the comm's socket (wire.h):
 * railnetIbCheckFoMsg, then what the sender and the receiver read of an accepted message
 * (its dead-QP bits within the comm's QPs, its entries within the fifo slots; a recovery
 * entry's QP index within the comm's QPs, a probe entry's two devices within a vDevice's).
 * Input: byte 0 is the comm's QP count (1..128); byte 1 picks the mode. Even: the rest
 * overlays a zeroed message (raw bytes from the wire). Odd: a valid STATE message is
 * patched by the rest, read as (2-byte offset, 1-byte value) triples. */
#include "fuzz_common.h"
#include "../src/transport/net_ib/wire.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static struct railnetIbFoMsg m;
  if (size < 2) return 0;
  int nqps = 1 + data[0] % NCCL_IB_MAX_QPS;
  memset(&m, 0, sizeof(m));
  if ((data[1] & 1) == 0) {
    size_t n = size - 2 < sizeof(m) ? size - 2 : sizeof(m);
    memcpy(&m, data + 2, n);
  } else {
    m.magic = RAILNET_IB_FO_MAGIC;
    m.type = RAILNET_IB_FO_STATE;
    m.nEntries = 3;
    m.deadQps[0] = 1;
    for (int e = 0; e < 3; e++) {
      m.entries[e].id = 100 + (uint64_t)e;
      m.entries[e].missing = 1;
    }
    for (size_t i = 2; i + 3 <= size; i += 3) {
      size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % sizeof(m);
      ((uint8_t*)&m)[off] = data[i + 2];
    }
  }
  ncclResult_t r = railnetIbCheckFoMsg(&m, nqps, "192.0.2.1<4242>");
  if (r != ncclSuccess) {
    FUZZ_CHECK(r == ncclRemoteError, "check gave %d", (int)r);
    return 0;
  }
  FUZZ_CHECK(m.magic == RAILNET_IB_FO_MAGIC, "magic %llx", (unsigned long long)m.magic);
  FUZZ_CHECK(m.type >= RAILNET_IB_FO_NOTIFY && m.type <= RAILNET_IB_FO_PROBE_ACK, "type %u", m.type);
  FUZZ_CHECK(m.nEntries <= RAILNET_IB_FIFO_SLOTS, "%u entries", m.nEntries);
  for (int q = nqps; q < NCCL_IB_MAX_QPS; q++)
    FUZZ_CHECK(!(m.deadQps[q / 64] & (1ull << (q % 64))), "QP %d of %d named gone", q, nqps);
  int probe = m.type >= RAILNET_IB_FO_PROBE_REQ;
  for (uint32_t e = 0; m.type >= RAILNET_IB_FO_RECOVER_REQ && !probe && e < m.nEntries; e++)
    FUZZ_CHECK(m.entries[e].id < (uint64_t)nqps && m.entries[e].missing <= 0xffffff, "recovery entry %u", e);
  for (uint32_t e = 0; probe && e < m.nEntries; e++) /* probe.c indexes its per-device arrays with them */
    FUZZ_CHECK((m.entries[e].id & 0xff) < NCCL_IB_MAX_DEVS_PER_NIC && (m.entries[e].id >> 8) < NCCL_IB_MAX_DEVS_PER_NIC &&
                   m.entries[e].missing <= 0xffffff,
               "probe entry %u", e);
  uint64_t sum = 0;
  for (uint32_t e = 0; e < m.nEntries; e++) sum += m.entries[e].id ^ m.entries[e].missing; /* what applyState reads */
  volatile uint64_t sink = sum;
  (void)sink;
  return 0;
}
