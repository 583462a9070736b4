// The fixture of the IB data path unit tests (ib_p2p_test.cc, ib_accept_test.cc): the real IB
// plugin over the in-process loopback fake of the verbs data calls (ib_fake_data.h), four
// fake RoCE HCAs fk0..fk3, and helpers to connect, register, move and check messages. Each
// test file that includes it gets its own copy (an anonymous namespace), as ib_fake_verbs.h.
#pragma once
#include "test_util.h"
#include <string.h>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include "ib_fake_data.h"
#include "net_pair.h"
#include "plugin_loader.h"

extern "C" {
#include "railnet.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}

namespace {

const ncclNet_t* ib = &railnetNetIb;

// Byte i of message k: depends on both, so that a chunk written at the wrong offset, or a
// message in another's buffer, does not compare equal.
char patternByte(int k, size_t i) { return (char)((k * 131 + i * 7 + (i >> 9) * 13 + 1) & 0xff); }
void fill(char* b, size_t n, int k) {
  for (size_t i = 0; i < n; i++) b[i] = patternByte(k, i);
}
// "" or where the first wrong byte is.
std::string check(const char* b, size_t n, int k) {
  for (size_t i = 0; i < n; i++)
    if (b[i] != patternByte(k, i)) return "message " + std::to_string(k) + ": wrong byte at " + std::to_string(i) + " of " + std::to_string(n);
  return "";
}
const char kGuard = (char)0xEE;  // what a receive buffer holds beyond the bytes sent

class IbDataPath : public ::testing::Test {
 protected:
  static FakeWorld* W;
  static FakeNet* N;
  static struct railnetIbvSymbols table;
  static void* ctx;
  static ScopedEnv* suiteEnv;
  static TempDir* sysfs;
  static int dev0, dev1, fused0, fused1;  // fk0, fk1, fk0+fk2, fk1+fk3

  static void SetUpTestSuite() {
    W = new FakeWorld;
    world = W;
    N = new FakeNet;
    net = N;
    for (int i = 0; i < 4; i++) {
      FakeHca& h = addHca("fk" + std::to_string(i), 1, IBV_LINK_LAYER_ETHERNET, 0x1000 + i);
      h.ports[0].gids[0] = {"fe80::" + std::to_string(i + 1), 2};
      h.ports[0].gids[1] = {"::ffff:198.18." + std::to_string(i / 2) + "." + std::to_string(i % 2 + 1), 2};
      N->addAsyncPipe(h);
    }
    table = fakeDataVerbs();
    railnetIbvSetSymbols(&table);
    // a GPUDirect peer memory module, so that receives are flushed (iflush)
    sysfs = new TempDir;
    sysfs->write("module/nvidia_peermem/version", "1.0\n");
    suiteEnv = new ScopedEnv;
    suiteEnv->set("SYSFS_PATH", sysfs->path().c_str());
    suiteEnv->set("NCCL_SOCKET_IFNAME", "lo");
    for (const char* v : {"NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_IB_QPS_PER_CONNECTION",
                          "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_USE_INLINE", "RAILNET_IB_EAGER_SIZE",
                          "NCCL_IB_RESILIENCY_PORT_FAILOVER", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_SOCKET_FAMILY",
                          "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_GDR_FLUSH_DISABLE", "RAILNET_TRANSPORT",
                          "NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME", "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS"})
      suiteEnv->unset(v);
    railnetIbResetDevices();
    railnetIbGdrReset();
    ASSERT_EQ(ib->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess) << LogCapture::all();
    dev0 = pluginDeviceNamed(ib, "fk0", 0);
    dev1 = pluginDeviceNamed(ib, "fk1", 0);
    fused0 = pluginFuseNamed(ib, "fk0", "fk2", nullptr);
    fused1 = pluginFuseNamed(ib, "fk1", "fk3", nullptr);
  }
  static void TearDownTestSuite() {
    if (ctx) ib->finalize(ctx);
    ctx = nullptr;
    railnetIbResetDevices();
    railnetIbGdrReset();
    railnetIbvSetSymbols(nullptr);
    delete suiteEnv;
    delete sysfs;
    delete N;
    delete W;
    net = nullptr;
    world = nullptr;
  }

  ScopedEnv env;
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  struct Reg {
    void* comm;
    void* mh;
  };
  std::vector<Reg> regs;
  std::vector<std::unique_ptr<std::vector<char>>> bufs;

  void SetUp() override {
    ASSERT_GE(dev0, 0);
    ASSERT_GE(dev1, 0);
    ASSERT_GE(fused0, 0);
    ASSERT_GE(fused1, 0);
    N->wcFaults.clear();
    N->postFaults.clear();
    N->dropped.clear();
    N->hold = false;
    N->holdMatch = nullptr;
    N->stall = nullptr;
    for (auto& h : W->hcas) h.ports[0].attr.state = IBV_PORT_ACTIVE;
    N->cqOverflows = N->badDeregs = 0;
  }
  void TearDown() override {
    closeAll();
    EXPECT_EQ(N->cqOverflows, 0) << "a CQ overran: the transport sized it too small for what it signals";
    EXPECT_EQ(N->badDeregs, 0) << "dereg_mr of a registration that was not (or no longer) there";
    // every QP of the test's comms is destroyed: nothing is left posting
    for (auto& q : N->qps) EXPECT_TRUE(q.destroyed) << "QP " << q.qp.qp_num << " outlived its comm";
  }
  void closeAll() {
    for (auto& r : regs) ib->deregMr(r.comm, r.mh);
    regs.clear();
    if (sc) ib->closeSend(sc);
    if (rc) ib->closeRecv(rc);
    if (lc) ib->closeListen(lc);
    sc = rc = lc = nullptr;
  }
  void connect(int sdev, int rdev) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    ASSERT_EQ(ib->listen(ctx, rdev, handle, &lc), ncclSuccess);
    ASSERT_TRUE(netConnectPair(ib, ctx, sdev, handle, lc, &sc, &rc, 20000)) << LogCapture::all();
  }
  // Connects fk0 -> fk1 and posts one receive of n bytes (tag 0): the receive's request
  // (nullptr on failure), and in *src / *smh a registered send buffer of n bytes.
  void* connectWithOneReceive(size_t n, char** src, void** smh) {
    connect(dev0, dev1);
    if (sc == nullptr || rc == nullptr) return nullptr;
    void* rmh;
    *src = buffer(sc, n, smh);
    void* d = buffer(rc, n, &rmh);
    size_t sz = n;
    int tag = 0;
    void* rr = nullptr;
    EXPECT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh, nullptr, &rr), ncclSuccess);
    return rr;
  }
  // A buffer of n bytes (+ 64 guard bytes, also registered) on comm. A send buffer's guard
  // bytes differ from a receive buffer's, so that a write past the size sent shows.
  char* buffer(void* comm, size_t n, void** mh, int type = NCCL_PTR_HOST) {
    bufs.push_back(std::make_unique<std::vector<char>>(n + 64, comm == sc ? (char)0x5A : kGuard));
    char* p = bufs.back()->data();
    EXPECT_EQ(ib->regMr(comm, p, n + 64, type, mh), ncclSuccess);
    regs.push_back({comm, *mh});
    return p;
  }
  // Tests req until it is done: "" (sizes filled), or what test() returned.
  std::string wait(void* req, int* sizes, ncclResult_t* res = nullptr) {
    long long deadline = netNowNs() + 10000000000LL;
    int done = 0;
    while (!done) {
      ncclResult_t r = ib->test(req, &done, sizes);
      if (res) *res = r;
      if (r != ncclSuccess) return "test() returned " + std::to_string(r);
      if (!done && netNowNs() > deadline) return "not done after 10 s";
    }
    return "";
  }
  // isend until it takes the message; meanwhile the receiver's request rr (when given) is
  // tested, as NCCL progresses both ends: *rdone / rsizes say whether it finished.
  void* isendNow(void* data, size_t size, int tag, void* mh, void* rr = nullptr, int* rdone = nullptr,
                 int* rsizes = nullptr) {
    void* req = nullptr;
    long long deadline = netNowNs() + 10000000000LL;
    while (req == nullptr && netNowNs() < deadline) {
      EXPECT_EQ(ib->isend(sc, data, size, tag, mh, nullptr, &req), ncclSuccess);
      if (rr && !*rdone) {
        EXPECT_EQ(ib->test(rr, rdone, rsizes), ncclSuccess);
      }
      if (::testing::Test::HasFailure()) return nullptr;
    }
    return req;
  }
  // Moves count messages of msg bytes, window in flight, the receives posted first as NCCL
  // does; before(k) runs before message k's receive. "" or what went wrong.
  std::string stream(int count, size_t msg, int window, const std::function<void(int)>& before) {
    std::vector<void*> smh(window), rmh(window);
    std::vector<char*> src(window), dst(window);
    for (int w = 0; w < window; w++) {
      src[w] = buffer(sc, msg, &smh[w]);
      dst[w] = buffer(rc, msg, &rmh[w]);
    }
    struct Slot {
      void *rr = nullptr, *sr = nullptr;
      bool rdone = false, sdone = false;
      int k = -1;
    };
    std::vector<Slot> slots(window);
    int nextRecv = 0, nextSend = 0, finished = 0;
    long long deadline = netNowNs() + 20000000000LL;
    while (finished < count) {
      if (netNowNs() > deadline) return std::to_string(finished) + " of " + std::to_string(count) + " done at the deadline";
      if (nextRecv < count && slots[nextRecv % window].k < 0) {
        Slot& s = slots[nextRecv % window];
        if (before) before(nextRecv);
        s = Slot();
        void* data = dst[nextRecv % window];
        size_t size = msg;
        int tag = 1;
        memset(data, kGuard, msg + 64);
        fill(src[nextRecv % window], msg, nextRecv);
        ncclResult_t r = ib->irecv(rc, 1, &data, &size, &tag, &rmh[nextRecv % window], nullptr, &s.rr);
        if (r != ncclSuccess) return "irecv " + std::to_string(nextRecv) + " returned " + std::to_string(r);
        if (s.rr) s.k = nextRecv++;
      }
      if (nextSend < nextRecv) {
        Slot& s = slots[nextSend % window];
        ncclResult_t r = ib->isend(sc, src[nextSend % window], msg, 1, smh[nextSend % window], nullptr, &s.sr);
        if (r != ncclSuccess) return "isend " + std::to_string(nextSend) + " returned " + std::to_string(r);
        if (s.sr) nextSend++;
      }
      for (auto& s : slots) {
        if (s.k < 0) continue;
        int done = 0, got = -1;
        if (s.sr && !s.sdone) {
          ncclResult_t r = ib->test(s.sr, &done, nullptr);
          if (r != ncclSuccess) return "send test " + std::to_string(s.k) + " returned " + std::to_string(r);
          s.sdone = done;
        }
        if (!s.rdone) {
          ncclResult_t r = ib->test(s.rr, &done, &got);
          if (r != ncclSuccess) return "receive test " + std::to_string(s.k) + " returned " + std::to_string(r);
          if (done) {
            s.rdone = true;
            if (got != (int)msg) return "message " + std::to_string(s.k) + " reported " + std::to_string(got) + " bytes";
            std::string bad = check(dst[s.k % window], msg, s.k);
            if (!bad.empty()) return bad;
          }
        }
        if (s.rdone && s.sdone) {
          s.k = -1;
          finished++;
        }
      }
    }
    return "";
  }
  // The fake QPs of the test's comms on HCA name (not destroyed).
  std::vector<FakeQp*> qpsOn(const char* name) {
    std::vector<FakeQp*> v;
    for (auto& q : N->qps)
      if (!q.destroyed && q.hca->name == name) v.push_back(&q);
    return v;
  }
  static int eventsAcked() {
    std::lock_guard<std::mutex> g(W->evLock);
    return W->acks;
  }
  static size_t bytesOn(const std::vector<FakeQp*>& qs) {
    size_t n = 0;
    for (auto* q : qs) n += q->bytes;
    return n;
  }
};
FakeWorld* IbDataPath::W;
FakeNet* IbDataPath::N;
struct railnetIbvSymbols IbDataPath::table;
void* IbDataPath::ctx;
ScopedEnv* IbDataPath::suiteEnv;
TempDir* IbDataPath::sysfs;
int IbDataPath::dev0 = -1, IbDataPath::dev1 = -1, IbDataPath::fused0 = -1, IbDataPath::fused1 = -1;

}  // namespace
