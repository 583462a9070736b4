// The ring of an RMA group (src/transport/net_ib/rma/rma_group.h) on loopback, ranks as
// threads, at the socket layer's defaults: it forms whatever order the ranks come in; the
// all-gather gives every rank every rank's bytes (8 bytes, and 1 MiB + 3 so that the socket
// buffers fill and the ring's sends and receives must go side by side); a stranger that
// connects to a listener first, and a rank of another group, are dropped and the real rank
// still gets in; a rank that leaves fails the others' next exchange at once, with a WARN
// naming it; bad arguments are refused.
#include <gtest/gtest.h>
#include <string.h>
#include <unistd.h>
#include <atomic>
#include <thread>
#include <vector>
#include "test_util.h"
#include "socket.h"
#include "../../src/transport/net_ib/rma/rma_group.h"

namespace {

union ncclSocketAddress loopback() {
  union ncclSocketAddress lo;
  EXPECT_EQ(ncclSocketGetAddrFromString(&lo, "127.0.0.1:1"), ncclSuccess);  // its port is ignored
  return lo;
}

struct Ranks {
  int n;
  std::vector<std::vector<uint8_t>> handles;
  std::vector<void*> ptrs;
  std::vector<railnetRmaListen*> listens;
  explicit Ranks(int nranks) : n(nranks), handles(nranks, std::vector<uint8_t>(128)), ptrs(nranks), listens(nranks) {
    union ncclSocketAddress lo = loopback();
    for (int r = 0; r < n; r++) {
      EXPECT_EQ(railnetRmaGroupListen(&lo, handles[r].data(), &listens[r]), ncclSuccess);
      ptrs[r] = handles[r].data();
    }
  }
  ~Ranks() {
    for (auto* l : listens) railnetRmaGroupListenClose(l);
  }
};

// Every rank joins the ring, each from its own thread; their groups (NULL: that one failed).
std::vector<railnetRmaGroup*> connectAll(Ranks& ranks) {
  std::vector<railnetRmaGroup*> gs(ranks.n, nullptr);
  std::vector<std::thread> ts;
  for (int r = 0; r < ranks.n; r++)
    ts.emplace_back([&, r] {
      EXPECT_EQ(railnetRmaGroupConnect(ranks.ptrs.data(), ranks.n, r, ranks.listens[r], &gs[r]), ncclSuccess);
    });
  for (auto& t : ts) t.join();
  return gs;
}

// rank r's block of an all-gather of `bytes`: a pattern of r and the offset
std::vector<uint8_t> block(int r, size_t bytes) {
  std::vector<uint8_t> b(bytes);
  for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)(r * 31 + i * 7 + (i >> 8));
  return b;
}

TEST(RmaGroup, FourRanksFormTheRingAndAllGatherEveryByte) {
  const int n = 4;
  Ranks ranks(n);
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int r = n - 1; r >= 0; r--) {  // the last rank first: each connects before its peer listens for it
    ts.emplace_back([&, r] {
      if (r == 0) usleep(200000);  // and rank 0 comes late
      railnetRmaGroup* g = nullptr;
      if (railnetRmaGroupConnect(ranks.ptrs.data(), n, r, ranks.listens[r], &g) != ncclSuccess) {
        failures++;
        return;
      }
      for (size_t bytes : {(size_t)8, (size_t)(1 << 20) + 3}) {
        std::vector<uint8_t> all(bytes * n, 0xee), mine = block(r, bytes);
        if (railnetRmaGroupAllGather(g, mine.data(), all.data(), bytes) != ncclSuccess) failures++;
        for (int k = 0; k < n; k++)
          if (memcmp(all.data() + k * bytes, block(k, bytes).data(), bytes) != 0) failures++;
      }
      if (railnetRmaGroupBarrier(g) != ncclSuccess) failures++;
      railnetRmaGroupClose(g);
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(RmaGroup, OneRankIsAGroupOfItself) {
  Ranks ranks(1);
  railnetRmaGroup* g = nullptr;
  ASSERT_EQ(railnetRmaGroupConnect(ranks.ptrs.data(), 1, 0, ranks.listens[0], &g), ncclSuccess);
  uint64_t mine = 0x1234, all = 0;
  EXPECT_EQ(railnetRmaGroupAllGather(g, &mine, &all, 8), ncclSuccess);
  EXPECT_EQ(all, mine);
  EXPECT_EQ(railnetRmaGroupBarrier(g), ncclSuccess);
  railnetRmaGroupClose(g);
}

// A connection to rank 1's listener that sends NCCL_SOCKET_MAGIC's handshake and then what
// is not a hello of this group; one from a "rank 1 of 3" that was handed rank 1's handle
// (a rank of another group, given a wrong handle list). Both come before rank 0; both are
// dropped (INFO), and rank 0 still gets in.
void strangerSends(const railnetRmaHandle& h, const void* bytes, int len, ncclSocket* s) {
  ASSERT_EQ(ncclSocketInit(s, &h.addr, h.socketMagic, ncclSocketTypeNetIb, nullptr, 0), ncclSuccess);
  ASSERT_EQ(ncclSocketConnect(s), ncclSuccess);
  EXPECT_EQ(ncclSocketSend(s, const_cast<void*>(bytes), len), ncclSuccess);
}

bool waitLog(const char* needle) {
  for (int i = 0; i < 4000 && !LogCapture::contains(needle); i++) usleep(5000);
  return LogCapture::contains(needle);
}

TEST(RmaGroup, AStrangerAndAnotherGroupsRankAreDroppedAndTheRingForms) {
  LogCapture log;
  Ranks ranks(2);
  railnetRmaGroup* g1 = nullptr;
  std::thread rank1([&] { EXPECT_EQ(railnetRmaGroupConnect(ranks.ptrs.data(), 2, 1, ranks.listens[1], &g1), ncclSuccess); });
  railnetRmaHandle h1;
  memcpy(&h1, ranks.ptrs[1], sizeof(h1));
  ncclSocket stranger, other;
  char junk[24] = "GET / HTTP/1.0\r\n\r\n";
  strangerSends(h1, junk, sizeof(junk), &stranger);
  EXPECT_TRUE(waitLog("not a rank of this group")) << log.all();
  railnetRmaHello hello = {RAILNET_RMA_HANDLE_MAGIC, h1.token, 1, 3};
  strangerSends(h1, &hello, sizeof(hello), &other);
  EXPECT_TRUE(waitLog("it says rank 1 of 3, the ring wants rank 0 of 2")) << log.all();
  railnetRmaGroup* g0 = nullptr;
  EXPECT_EQ(railnetRmaGroupConnect(ranks.ptrs.data(), 2, 0, ranks.listens[0], &g0), ncclSuccess);
  rank1.join();
  ASSERT_NE(g0, nullptr);
  ASSERT_NE(g1, nullptr);
  uint64_t all0[2], all1[2], v0 = 100, v1 = 101;
  std::thread ag([&] { EXPECT_EQ(railnetRmaGroupAllGather(g1, &v1, all1, 8), ncclSuccess); });
  EXPECT_EQ(railnetRmaGroupAllGather(g0, &v0, all0, 8), ncclSuccess);
  ag.join();
  EXPECT_EQ(all0[0], 100u);
  EXPECT_EQ(all0[1], 101u);
  EXPECT_EQ(all1[0], 100u);
  EXPECT_EQ(all1[1], 101u);
  railnetRmaGroupClose(g0);
  railnetRmaGroupClose(g1);
  ncclSocketClose(&stranger);
  ncclSocketClose(&other);
}

// Four ranks; rank 2 leaves after the ring formed. Ranks 0, 1 and 3 fail their next
// all-gather at once with a WARN naming the rank that left, rank 0 too, which is not next to
// it (the ranks that see the close end their own connections), instead of waiting for it.
TEST(RmaGroup, ARankThatLeavesFailsTheOthersAtOnce) {
  LogCapture log;
  const int n = 4;
  Ranks ranks(n);
  std::vector<railnetRmaGroup*> gs = connectAll(ranks);
  ASSERT_TRUE(gs[0] && gs[1] && gs[2] && gs[3]);
  railnetRmaGroupClose(gs[2]);
  std::vector<ncclResult_t> res(n, ncclSuccess);
  std::vector<std::thread> ts;
  for (int r : {0, 1, 3})
    ts.emplace_back([&, r] {
      uint64_t v = (uint64_t)r, all[4];
      res[r] = railnetRmaGroupAllGather(gs[r], &v, all, 8);
    });
  for (auto& t : ts) t.join();
  for (int r : {0, 1, 3}) EXPECT_EQ(res[r], ncclRemoteError) << "rank " << r;
  EXPECT_TRUE(log.contains("rank 2 left the group", NCCL_LOG_WARN)) << log.all();
  // a broken group refuses its next exchange at once
  uint64_t v = 0, all[4];
  EXPECT_EQ(railnetRmaGroupAllGather(gs[0], &v, all, 8), ncclRemoteError);
  EXPECT_TRUE(log.contains("the group broke earlier", NCCL_LOG_WARN)) << log.all();
  for (int r : {0, 1, 3}) railnetRmaGroupClose(gs[r]);
}

// Four ranks; rank 2 leaves without a word. Its neighbours (1 and 3) see the group broken at
// rank 2; rank 0, whose neighbours are alive, sees it too once they ended their connections
// (the break goes around the ring): every rank learns it, none waits.
bool brokenWithin(railnetRmaGroup* g, int* lost) {
  for (int i = 0; i < 20000; i++) {
    if (railnetRmaGroupBroken(g, lost)) return true;
    usleep(1000);
  }
  return false;
}

TEST(RmaGroup, ARankThatLeavesBreaksTheGroupForEveryRank) {
  const int n = 4;
  Ranks ranks(n);
  std::vector<railnetRmaGroup*> gs = connectAll(ranks);
  ASSERT_TRUE(gs[0] && gs[1] && gs[2] && gs[3]);
  int lost = -9;
  EXPECT_FALSE(railnetRmaGroupBroken(gs[0], &lost));  // all alive: not broken
  railnetRmaGroupClose(gs[2]);
  EXPECT_TRUE(brokenWithin(gs[1], &lost));
  EXPECT_EQ(lost, 2);
  EXPECT_TRUE(brokenWithin(gs[3], &lost));
  EXPECT_EQ(lost, 2);
  EXPECT_TRUE(brokenWithin(gs[0], &lost));
  EXPECT_TRUE(lost == 1 || lost == 3) << lost;
  for (int r : {0, 1, 3}) railnetRmaGroupClose(gs[r]);
}

TEST(RmaGroup, BadArgumentsAreRefused) {
  LogCapture log;
  Ranks ranks(2);
  railnetRmaGroup* g = nullptr;
  EXPECT_EQ(railnetRmaGroupConnect(ranks.ptrs.data(), 2, 2, ranks.listens[0], &g), ncclInvalidArgument);
  EXPECT_EQ(railnetRmaGroupConnect(ranks.ptrs.data(), 0, 0, ranks.listens[0], &g), ncclInvalidArgument);
  std::vector<uint8_t> bogus(128, 0x5a);
  std::vector<void*> hs = {ranks.ptrs[0], bogus.data()};
  EXPECT_EQ(railnetRmaGroupConnect(hs.data(), 2, 0, ranks.listens[0], &g), ncclInvalidArgument);
  EXPECT_TRUE(log.contains("is not one of railnet's RMA listen", NCCL_LOG_WARN)) << log.all();
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(railnetRmaGroupAllGather(nullptr, nullptr, nullptr, 0), ncclInvalidArgument);
}

}  // namespace

// The RMA plugin tables railnet exports: the entries where NCCL 2.30 reads them, and NCCL's
// two tables and railnetGetRma()'s have every one.
extern "C" {
#include "railnet.h"
#include "../../src/transport/net_ib/rma/rma.h"
extern const ncclRma_v14_t ncclRmaPlugin_v14;
extern const ncclRma_v13_t ncclRmaPlugin_v13;
}
TEST(RmaAbi, TheTablesHaveNccl230sLayout) {
  EXPECT_EQ(offsetof(ncclRma_v14_t, connect), 5 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclRma_v14_t, iputSignal), 14 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclRma_v14_t, rmaProgress), 18 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclGin_v13_t, createContext), 6 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclGin_v13_t, ginProgress), 18 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclRmaConfig_v14_t, rankStride), 2 * sizeof(int));
  EXPECT_EQ(offsetof(ncclGinConfig_v13_t, trafficClass), 4 * sizeof(int));
  EXPECT_EQ(NCCL_NET_SIGNAL_OP_INC, 1);
  EXPECT_EQ(NCCL_NET_SIGNAL_OP_ADD, 2);
}

TEST(RmaAbi, RailnetsTablesHaveEveryEntry) {
  auto every = [](const void* table, size_t bytes) {
    const void* const* p = (const void* const*)table;
    for (size_t i = 0; i < bytes / sizeof(void*); i++)
      if (p[i] == nullptr) return (int)i;
    return -1;
  };
  EXPECT_EQ(every(&ncclRmaPlugin_v14, sizeof(ncclRmaPlugin_v14)), -1);
  EXPECT_EQ(every(&ncclRmaPlugin_v13, sizeof(ncclRmaPlugin_v13)), -1);
  EXPECT_EQ(every(railnetGetRma(), sizeof(ncclRma_v14_t)), -1);
  // version 13: no device handle for a proxy; a bad call is refused, never a crash
  ncclGinConfig_v13_t cfg = {0, 0, 1, 0, 0};
  ncclNetDeviceHandle_v11_t* dev = (ncclNetDeviceHandle_v11_t*)&cfg;
  void* ctx = &cfg;
  EXPECT_EQ(ncclRmaPlugin_v13.createContext(nullptr, &cfg, &ctx, &dev), ncclInvalidArgument);
  EXPECT_EQ(dev, nullptr);
  bool err = true;
  EXPECT_EQ(railnetGetRma()->queryLastError(nullptr, &err), ncclInvalidArgument);
}

// A context's CQ holds every work request its QPs may have in flight (512 per connected rank
// and a flush QP's), within the smallest max_cqe of the vDevice's devices, with an INFO when
// that is less (rxe's 32767 is less from 64 ranks on); a device that reports none does not limit;
// one that holds less than an operation's work requests is refused with a WARN.
extern "C" {
#include "../../src/transport/net_ib/devices.h"
}
TEST(RmaContext, TheCqHoldsWhatMayBeInFlightWithinTheDevicesMaxCqe) {
  ncclNetVDeviceProps_t savedProps = ncclIbMergedDevs[0].vProps;
  int savedCqe[2] = {ncclIbDevs[0].maxCqe, ncclIbDevs[1].maxCqe};
  ncclIbMergedDevs[0].vProps.ndevs = 2;
  ncclIbMergedDevs[0].vProps.devs[0] = 0, ncclIbMergedDevs[0].vProps.devs[1] = 1;
  struct railnetRmaColl cc;
  memset(&cc, 0, sizeof(cc));
  cc.vDev = 0;
  LogCapture log;
  int room = 0;
  ncclIbDevs[0].maxCqe = 32767, ncclIbDevs[1].maxCqe = 0;
  int want4 = 4 * RAILNET_RMA_SQ_DEPTH + NET_IB_RECV_REQUESTS;
  EXPECT_EQ(railnetRmaCqEntries(&cc, 4, &room), want4);
  EXPECT_EQ(room, want4);
  EXPECT_FALSE(log.contains("its CQ holds", NCCL_LOG_INFO));
  EXPECT_EQ(railnetRmaCqEntries(&cc, 64, &room), 32767);  // 64 x 512 + the flush QP's: more
  EXPECT_EQ(room, 32767);
  EXPECT_TRUE(log.contains("its CQ holds 32767: at most that many are", NCCL_LOG_INFO)) << log.all();
  ncclIbDevs[1].maxCqe = 1000;  // the smallest of the vDevice's devices
  EXPECT_EQ(railnetRmaCqEntries(&cc, 4, &room), 1000);
  ncclIbDevs[1].maxCqe = RAILNET_RMA_MAX_WRS - 1;  // not one operation's work requests: refused
  EXPECT_EQ(railnetRmaCqEntries(&cc, 4, &room), -1);
  EXPECT_TRUE(log.contains("an operation needs up to 17", NCCL_LOG_WARN)) << log.all();
  ncclIbMergedDevs[0].vProps = savedProps;
  ncclIbDevs[0].maxCqe = savedCqe[0], ncclIbDevs[1].maxCqe = savedCqe[1];
}
