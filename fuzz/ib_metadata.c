/* The IB transport's connection metadata, as a peer sends it during connect/accept:
 * railnetIbCheckMetadata, the check both sides run before any field is used, then the
 * uses connect/accept make of an accepted block (device and QP indices, the peer's device
 * name copied with a bound).
 * Input: byte 0 picks the mode. Even: the rest overlays a zeroed block from its start
 * (raw bytes from the wire). Odd: a valid block (2 devices, 4 QPs) is patched by the rest,
 * read as (2-byte offset, 1-byte value) triples, so that the fuzzer explores blocks that
 * are almost right. Byte 1 (when present) is the QP count the receiving side expects
 * (0: any). */
#include "fuzz_common.h"
#include "../src/transport/net_ib/wire.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  return 0;
}

static void validBlock(struct ncclIbConnectionMetadata* m) {
  memset(m, 0, sizeof(*m));
  m->magic = RAILNET_IB_META_MAGIC;
  m->version = RAILNET_IB_META_VERSION;
  m->ndevs = 2;
  m->nqps = 4;
  m->tc = 106;
  m->sl = 3;
  m->fifoAddr = 0x7f0000001000ULL;
  for (int d = 0; d < 2; d++) {
    m->devs[d].ibPort = 1;
    m->devs[d].linkLayer = IBV_LINK_LAYER_ETHERNET;
    m->devs[d].mtu = IBV_MTU_1024;
    m->devs[d].gidIndex = 3;
    m->devs[d].fifoRkey = 0x1234 + (uint32_t)d;
  }
  for (int q = 0; q < 4; q++) {
    m->qpInfo[q].qpn = 0x11 + (uint32_t)q;
    m->qpInfo[q].devIndex = q % 2;
  }
  snprintf(m->devName, sizeof(m->devName), "mlx5_0+mlx5_1");
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static struct ncclIbConnectionMetadata m;
  if (size < 1) return 0;
  int wantNqps = size > 1 ? data[1] % (NCCL_IB_MAX_QPS + 2) : 0;
  if (wantNqps > NCCL_IB_MAX_QPS) wantNqps = 0;
  if ((data[0] & 1) == 0) {
    memset(&m, 0, sizeof(m));
    size_t n = size - 1 < sizeof(m) ? size - 1 : sizeof(m);
    memcpy(&m, data + 1, n);
  } else {
    validBlock(&m);
    for (size_t i = 2; i + 3 <= size; i += 3) {
      size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % sizeof(m);
      ((uint8_t*)&m)[off] = data[i + 2];
    }
  }
  ncclResult_t r = railnetIbCheckMetadata(&m, "192.0.2.1<4242>", wantNqps);
  if (r != ncclSuccess) {
    FUZZ_CHECK(r == ncclRemoteError, "check gave %d", (int)r);
    return 0;
  }
  /* accepted: every index connect/accept will use is in range */
  FUZZ_CHECK(m.ndevs >= 1 && m.ndevs <= NCCL_IB_MAX_DEVS_PER_NIC, "ndevs %d", m.ndevs);
  FUZZ_CHECK(m.nqps >= 1 && m.nqps <= NCCL_IB_MAX_QPS, "nqps %d", m.nqps);
  FUZZ_CHECK(wantNqps == 0 || m.nqps == wantNqps, "nqps %d, wanted %d", m.nqps, wantNqps);
  FUZZ_CHECK(m.tc >= 0 && m.tc <= 255 && m.sl >= 0 && m.sl <= 15, "tc %d sl %d", m.tc, m.sl);
  unsigned sum = 0;
  for (int q = 0; q < m.nqps; q++) {
    int d = m.qpInfo[q].devIndex;
    FUZZ_CHECK(d >= 0 && d < m.ndevs, "QP %d on device %d of %d", q, d, m.ndevs);
    FUZZ_CHECK(m.qpInfo[q].qpn != 0 && m.qpInfo[q].qpn <= 0xffffff, "qpn %u", m.qpInfo[q].qpn);
    sum += m.devs[d].linkLayer + m.devs[d].mtu; /* what checkLinkLayers/connectQps read */
  }
  for (int d = 0; d < m.ndevs; d++)
    FUZZ_CHECK(m.devs[d].mtu >= IBV_MTU_256 && m.devs[d].mtu <= IBV_MTU_4096 && m.devs[d].fifoRkey != 0,
               "device %d mtu %d rkey %u", d, m.devs[d].mtu, m.devs[d].fifoRkey);
  char name[MAX_MERGED_DEV_NAME];
  snprintf(name, sizeof(name), "%.*s", (int)sizeof(m.devName) - 1, m.devName);
  FUZZ_CHECK(strlen(name) < sizeof(m.devName), "device name of %zu bytes", strlen(name));
  if (m.devs[0].flags & RAILNET_IB_FLAG_FO_RECORDS) /* records.c reads and writes there */
    for (int d = 0; d < m.ndevs; d++)
      FUZZ_CHECK(m.foRecAddr != 0 && m.foRecRkeys[d] != 0, "records at 0x%llx, device %d rkey %u",
                 (unsigned long long)m.foRecAddr, d, m.foRecRkeys[d]);
  /* eager.c sizes its ring slots by it; a sender's credit words must be named (a receiver's
   * pooled ring comes later, in a credit write) */
  if (m.devs[0].flags & RAILNET_IB_FLAG_EAGER_ANY)
    FUZZ_CHECK(m.eagerSize >= 1 && m.eagerSize <= RAILNET_IB_EAGER_MAX_BYTES &&
                   (m.eagerAddr != 0 || (wantNqps > 0 && (m.devs[0].flags & RAILNET_IB_FLAG_EAGER_POOL))),
               "eager size %u at 0x%llx", m.eagerSize, (unsigned long long)m.eagerAddr);
  (void)sum;
  return 0;
}
