// Eager small messages (RAILNET_IB_EAGER_SIZE, src/transport/net_ib/eager/eager.h) on real
// soft-RoCE (the tier's rxe0 and rxe1 on one veth pair; both ends in this process, the
// sender on a thread where they run at once): every byte of a mix of eager and rendezvous
// messages into small and large receive buffers; what a small message costs (work requests
// and completions on each side, counted by the comms) against the default protocol;
// messages waiting in the ring before their irecvs and a full ring holding the sender
// back; GPU receive buffers written by the NIC; a multi-receive closing the eager messages.
#include "test_util.h"
#include <string.h>
#include <thread>
#include <vector>
#include "net_pair.h"

extern "C" {
#include "ibvwrap.h"
#include "../../src/transport/net_ib/comm.h"
#include "../../src/transport/net_ib/completion.h"
#include "../../src/transport/net_ib/devices.h"
#include "../../src/transport/net_ib/eager/eager.h"
#include "../../src/transport/net_ib/eager/eager_state.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}
#include "ib_test_env.h"

namespace {

const ncclNet_t* ib = &railnetNetIb;

long long deadlineIn(int ms) { return netNowNs() + (long long)ms * 1000000LL; }

class IbEagerSoftRoceTest : public IbTwoDevicesTest {
 protected:
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  void* smh = nullptr;
  void* rmh = nullptr;
  std::vector<char> sbuf, rbuf;

  void connect(const char* eager) { connectWith(eager ? eager : "0"); }  // nullptr: clear-to-send
  // RAILNET_IB_EAGER_SIZE=value (nullptr: unset, the default), connected, 1 MiB buffers registered.
  void connectWith(const char* value) {
    env.set("RAILNET_IB_EAGER_SIZE", value);
    initTwoDevices();
    ASSERT_EQ(ib->listen(ctx, 1, handle, &lc), ncclSuccess);
    ASSERT_TRUE(netConnectPair(ib, ctx, 0, handle, lc, &sc, &rc, 60000));
    sbuf.assign(1 << 20, 0);
    rbuf.assign(1 << 20, 0);
    ASSERT_EQ(ib->regMr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh), ncclSuccess);
    ASSERT_EQ(ib->regMr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh), ncclSuccess);
    if (((struct ncclIbSendComm*)sc)->eager && ((struct ncclIbRecvComm*)rc)->eager) warmUp();
  }
  // The comm's first small message (through its clear-to-send, or into the first-message box)
  // has the receiver take its ring from the pool (eager_pool.h) at the next irecv: two such
  // messages, then the wait for the credit write that names the ring at the sender. The work
  // counted so far is the baseline of cost().
  void warmUp() {
    exchange(2, 8);
    auto* e = ((struct ncclIbRecvComm*)rc)->eager;
    ASSERT_NE(e->c.buf, nullptr) << "the first small message took no ring";
    volatile uint64_t* ring = &((struct ncclIbSendComm*)sc)->eagerCredit.ringAddr;
    volatile uint64_t* mode = &((struct ncclIbSendComm*)sc)->eagerCredit.mode;
    long long dl = deadlineIn(10000);
    while ((*ring == 0 || *mode == 1) && netNowNs() < dl) {  // the grant, then the credit write after it
    }
    ASSERT_EQ(*ring, (uint64_t)(uintptr_t)e->c.buf) << "the credit write never named the ring at the sender";
    ASSERT_NE(*mode, 1u) << "the credit write after the grant never landed";
    base0 = {(double)sbase()->work.wrs, (double)sbase()->work.cqes, (double)rbase()->work.wrs,
             (double)rbase()->work.cqes};
  }
  void TearDown() override {
    if (smh) ib->deregMr(sc, smh);
    if (rmh) ib->deregMr(rc, rmh);
    if (sc) ib->closeSend(sc);
    if (rc) ib->closeRecv(rc);
    if (lc) ib->closeListen(lc);
    IbTwoDevicesTest::TearDown();
  }
  struct ncclIbNetCommBase* sbase() { return (struct ncclIbNetCommBase*)sc; }
  struct ncclIbNetCommBase* rbase() { return (struct ncclIbNetCommBase*)rc; }
  // isend until the transport takes it (NULL request: later), within the deadline.
  void* isend(size_t off, size_t size, long long dl) {
    void* req = nullptr;
    while (req == nullptr && netNowNs() < dl) {
      if (ib->isend(sc, sbuf.data() + off, size, 7, smh, nullptr, &req) != ncclSuccess) return nullptr;
    }
    return req;
  }
  void* irecv(size_t off, size_t posted) {
    void* data = rbuf.data() + off;
    int tag = 7;
    void* req = nullptr;
    EXPECT_EQ(ib->irecv(rc, 1, &data, &posted, &tag, &rmh, nullptr, &req), ncclSuccess);
    return req;
  }
  // n ping-pong-like exchanges of size bytes (irecv first, then isend, both tested to the end).
  void exchange(int n, size_t size) {
    for (int i = 0; i < n; i++) {
      memset(sbuf.data(), (char)(i + 1), size);
      void* r = irecv(0, size);
      ASSERT_NE(r, nullptr);
      void* s = isend(0, size, deadlineIn(10000));
      ASSERT_NE(s, nullptr) << "message " << i;
      std::string err;
      int got = -1;
      ASSERT_TRUE(netWait(ib, s, nullptr, deadlineIn(10000), &err)) << err;
      ASSERT_TRUE(netWait(ib, r, &got, deadlineIn(10000), &err)) << err;
      ASSERT_EQ(got, (int)size);
      for (size_t b = 0; b < size; b++) ASSERT_EQ(rbuf[b], (char)(i + 1)) << "message " << i << " byte " << b;
    }
  }
  // What each side's comm counted per message after n of them (printed with what).
  struct Cost {
    double sendWrs, sendCqes, recvWrs, recvCqes;
  };
  Cost base0{0, 0, 0, 0};  // what the comms counted before the n messages (warmUp())
  Cost cost(int n, const char* what) {
    Cost c{((double)sbase()->work.wrs - base0.sendWrs) / n, ((double)sbase()->work.cqes - base0.sendCqes) / n,
           ((double)rbase()->work.wrs - base0.recvWrs) / n, ((double)rbase()->work.cqes - base0.recvCqes) / n};
    printf("%s, per 8-byte message: sender %.2f WRs %.2f CQEs, receiver %.2f WRs %.2f CQEs\n", what, c.sendWrs,
           c.sendCqes, c.recvWrs, c.recvCqes);
    return c;
  }
};

// What 200 8-byte messages cost each side, eager against the default protocol.
TEST_F(IbEagerSoftRoceTest, SmallMessageCostsOneWriteAndFewerCompletions) {
  connect("1024");
  ASSERT_NE(((struct ncclIbSendComm*)sc)->eager, nullptr);
  ASSERT_NE(((struct ncclIbRecvComm*)rc)->eager, nullptr);
  const int n = 200;
  exchange(n, 8);
  Cost c = cost(n, "eager");
  // sender: one write, one in RAILNET_IB_EAGER_SIGNAL signaled; receiver: a receive WR reposted
  // and a credit write per RAILNET_IB_EAGER_SLOTS / 2 messages (plus the pre-posted ones)
  EXPECT_LE(c.sendWrs, 1.01);
  EXPECT_LE(c.sendCqes, 1.0 / RAILNET_IB_EAGER_SIGNAL + 0.01);
  EXPECT_LE(c.recvWrs, 1.0 + 2.0 / RAILNET_IB_EAGER_SLOTS + (double)RAILNET_IB_FIFO_SLOTS / n + 0.01);
  EXPECT_LE(c.recvCqes, 1.0 + 2.0 / RAILNET_IB_EAGER_SLOTS + 0.01);
}

TEST_F(IbEagerSoftRoceTest, DefaultProtocolCostsAClearToSendPerMessage) {
  connect(nullptr);
  ASSERT_EQ(((struct ncclIbSendComm*)sc)->eager, nullptr);
  ASSERT_EQ(((struct ncclIbRecvComm*)rc)->eager, nullptr);
  const int n = 200;
  exchange(n, 8);
  Cost c = cost(n, "default");
  EXPECT_GE(c.sendCqes, 1.0);  // every data write is signaled
  EXPECT_GE(c.recvWrs, 2.0);   // a receive WR and a clear-to-send write
}

// Eager and rendezvous mixed: sizes around the threshold into buffers of the message's
// size (no clear-to-send) and into large ones (announced; a small message may still come
// eagerly), several in flight, every byte checked; on one QP, on two QPs (messages round
// robin, each QP's completions in its order) and on a fused rxe0+rxe1 device (a ring
// registration and a bounce registration per device).
class IbEagerMixedTest : public IbEagerSoftRoceTest {
 protected:
  uint32_t agreedSize = 0;  // the eager size both ends agreed on (mixed())
  // The mix with RAILNET_IB_EAGER_SIZE=1024 and these variables, on the first device or on the
  // first two fused: every byte, and every position delivered in order.
  void run(std::initializer_list<std::pair<const char*, const char*>> vars, bool fused = false) {
    env.set("RAILNET_IB_EAGER_SIZE", "1024");
    for (const auto& v : vars) env.set(v.first, v.second);
    initTwoDevices();
    int d = 0;
    if (fused) {
      ASSERT_EQ(ibFuseFirstTwoDevices(&d), ncclSuccess);
    }
    size_t released = 0;
    EXPECT_EQ(mixed(d, &released), "");
    EXPECT_GE(released, 120u);
  }
  std::string mixed(int dev, size_t* eagerSlots, std::vector<size_t> more = {}) {
    if (ib->listen(ctx, dev, handle, &lc) != ncclSuccess) return "listen failed";
    void *s = nullptr, *r = nullptr;
    if (!netConnectPair(ib, ctx, dev, handle, lc, &s, &r, 60000)) return "connect/accept failed";
    NetPlan plan;
    plan.sizes = {0, 1, 8, 1023, 1024, 1025, 65536 + 3, 1 << 20};
    plan.sizes.insert(plan.sizes.end(), more.begin(), more.end());
    for (int k = 0; k < 120; k++) {
      size_t size = (size_t)(k * 97) % 2100;
      plan.groups.push_back({NetMsg{size, k % 2 ? size : (size_t)70000}});
    }
    plan.inflight = 8;
    plan.deadlineMs = 120000;
    return netRunPairInProcess(ib, s, r, plan, [&](void* sc, void* rc) -> std::string {
      struct railnetIbEagerRecv* e = ((struct ncclIbRecvComm*)rc)->eager;
      *eagerSlots = e ? (size_t)e->released : 0;
      agreedSize = e ? e->c.size : 0;
      // every send queue's count of posted work requests: never below the unsignaled eager
      // writes still in it (a data write's completion ends those of its own QP only)
      struct ncclIbNetCommBase* sb = (struct ncclIbNetCommBase*)sc;
      for (int q = 0; q < sb->nqps; q++)
        if (sb->qps[q].sqPosted < (int)sb->qps[q].eagerUnsig)
          return "QP " + std::to_string(q) + " counts " + std::to_string(sb->qps[q].sqPosted) +
                 " work requests posted, fewer than its " + std::to_string(sb->qps[q].eagerUnsig) + " unsignaled ones";
      return ((struct ncclIbSendComm*)sc)->eager && e ? "" : " (eager was not agreed)";
    });
  }
};

TEST_F(IbEagerMixedTest, MixedSizesAndBuffersMoveEveryByteOnOneQp) { run({}); }

TEST_F(IbEagerMixedTest, MixedSizesAndBuffersMoveEveryByteOnTwoQps) { run({{"NCCL_IB_QPS_PER_CONNECTION", "2"}}); }

// Receives matched by ID (NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME=1): the data writes carry their
// position and a sizes record; eager messages and requests-to-send still go by their QP's order.
TEST_F(IbEagerMixedTest, MixedSizesAndBuffersMoveEveryByteMatchedById) {
  run({{"NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME", "1"}, {"NCCL_IB_QPS_PER_CONNECTION", "2"}});
}

// Split over QPs (NCCL_IB_SPLIT_DATA_ON_QPS=1, 3 QPs): larger messages cut into a chunk per
// QP; an eager message whole on QP 0 and a mark of no bytes on each other QP.
TEST_F(IbEagerMixedTest, MixedSizesAndBuffersMoveEveryByteSplitOverQps) {
  run({{"NCCL_IB_SPLIT_DATA_ON_QPS", "1"}, {"NCCL_IB_QPS_PER_CONNECTION", "3"}});
}

TEST_F(IbEagerMixedTest, MixedSizesAndBuffersMoveEveryByteOnAFusedDevice) { run({}, true); }

// At the default settings (RAILNET_IB_EAGER_SIZE unset: RAILNET_IB_EAGER_DEFAULT), messages
// around the default size among the mix; mixed() fails if eager was not agreed.
TEST_F(IbEagerMixedTest, MixedSizesAndBuffersMoveEveryByteAtTheDefaults) {
  env.set("RAILNET_IB_EAGER_SIZE", nullptr);
  initTwoDevices();
  const size_t n = RAILNET_IB_EAGER_DEFAULT;
  size_t released = 0;
  EXPECT_EQ(mixed(0, &released, {n - 1, n, n + 1}), "");
  EXPECT_GE(released, 120u);
  EXPECT_EQ(agreedSize, n);
}

// A larger eager size: ring slots of that size rounded up to 64 bytes (3000: 3008), messages
// around it (2999, 3000, 3001) among the mix; and the largest size, 8192.
class IbEagerLargerSlots : public IbEagerMixedTest, public ::testing::WithParamInterface<int> {};

TEST_P(IbEagerLargerSlots, MixedSizesAndBuffersMoveEveryByte) {
  const size_t n = (size_t)GetParam();
  env.set("RAILNET_IB_EAGER_SIZE", std::to_string(n).c_str());
  initTwoDevices();
  size_t released = 0;
  EXPECT_EQ(mixed(0, &released, {n - 1, n, n + 1}), "");
  EXPECT_GE(released, 120u);
}

INSTANTIATE_TEST_SUITE_P(Size, IbEagerLargerSlots, ::testing::Values(3000, 8192));

// Messages before any irecv, as many as the ring has room for in the sender's last credit
// (16 slots from the count it was told: the warm-up's second message may not be counted yet):
// each isend is done at once and the bytes wait in the ring; the next one waits for room; the
// irecvs then find them in order.
TEST_F(IbEagerSoftRoceTest, MessagesWaitInTheRingAndAFullRingHoldsTheSender) {
  connect("1024");
  const int slots = (int)(((struct ncclIbSendComm*)sc)->eagerCredit.released + RAILNET_IB_EAGER_SLOTS - sbase()->fifoHead);
  ASSERT_GE(slots, RAILNET_IB_EAGER_SLOTS - 1) << "the credit write of the warm-up's ring is behind by more than a message";
  std::vector<void*> sends;
  for (int i = 0; i < slots; i++) {
    memset(sbuf.data() + i * 64, (char)(0x40 + i), 64);
    void* req = nullptr;
    ASSERT_EQ(ib->isend(sc, sbuf.data() + i * 64, 64, 7, smh, nullptr, &req), ncclSuccess);
    ASSERT_NE(req, nullptr) << "eager isend " << i << " was not taken at once";
    int done = 0;
    ASSERT_EQ(ib->test(req, &done, nullptr), ncclSuccess);
    EXPECT_EQ(done, 1) << "an eager isend is done when posted";
  }
  void* extra = nullptr;
  memset(sbuf.data() + slots * 64, 0x7f, 64);
  ASSERT_EQ(ib->isend(sc, sbuf.data() + slots * 64, 64, 7, smh, nullptr, &extra), ncclSuccess);
  EXPECT_EQ(extra, nullptr) << "the ring is full: the next isend must wait";
  for (int i = 0; i <= slots; i++) {
    void* r = irecv(i * 64, 64);
    ASSERT_NE(r, nullptr);
    if (i == slots) {  // credits came back with the first irecvs: now it goes
      extra = isend(slots * 64, 64, deadlineIn(10000));
      ASSERT_NE(extra, nullptr) << "the sender never got room in the ring back";
    }
    std::string err;
    int got = -1;
    ASSERT_TRUE(netWait(ib, r, &got, deadlineIn(10000), &err)) << err;
    EXPECT_EQ(got, 64);
    for (int b = 0; b < 64; b++) ASSERT_EQ(rbuf[i * 64 + b], (char)(i == slots ? 0x7f : 0x40 + i)) << i;
  }
  std::string err;
  ASSERT_TRUE(netWait(ib, extra, nullptr, deadlineIn(10000), &err)) << err;
}

// At the defaults, a new comm's first small message goes before its irecv: into the
// receiver's first-message box (wire.h), its isend done at once, with no eager buffer taken on
// either side. The receiver's next irecv takes its ring; the next message, once the sender
// knows the ring, goes eagerly into the ring and takes the bounce slots.
TEST_F(IbEagerSoftRoceTest, TheFirstSmallMessageGoesBeforeItsIrecv) {
  initTwoDevices();
  ASSERT_EQ(ib->listen(ctx, 1, handle, &lc), ncclSuccess);
  ASSERT_TRUE(netConnectPair(ib, ctx, 0, handle, lc, &sc, &rc, 60000));
  sbuf.assign(4096, 0);
  rbuf.assign(4096, 0);
  ASSERT_EQ(ib->regMr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh), ncclSuccess);
  ASSERT_EQ(ib->regMr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh), ncclSuccess);
  auto* se = ((struct ncclIbSendComm*)sc)->eager;
  auto* re = ((struct ncclIbRecvComm*)rc)->eager;
  ASSERT_NE(se, nullptr);
  ASSERT_NE(re, nullptr);
  ASSERT_NE(se->firstAddr, 0u) << "the receiver named no first-message box";
  for (int m = 0; m < 2; m++) {
    memset(sbuf.data(), 0x31 + m, 8);
    void* s = nullptr;
    void* r = nullptr;
    if (m == 0) {
      ASSERT_EQ(ib->isend(sc, sbuf.data(), 8, 7, smh, nullptr, &s), ncclSuccess);
      ASSERT_NE(s, nullptr) << "the first small message waited for its irecv";
    } else {  // the irecv takes the ring, and its credit write names it to the sender
      r = irecv(0, 64);
      ASSERT_NE(r, nullptr);
      EXPECT_NE(re->c.buf, nullptr) << "the irecv after the first message took no ring";
      volatile uint64_t* ring = &((struct ncclIbSendComm*)sc)->eagerCredit.ringAddr;
      long long dl = deadlineIn(10000);
      while (*ring == 0 && netNowNs() < dl) {
      }
      ASSERT_NE(*ring, 0u) << "the receiver's ring was never named";
      s = isend(0, 8, deadlineIn(10000));
      ASSERT_NE(s, nullptr);
    }
    EXPECT_EQ(((struct ncclIbRequest*)s)->type, NCCL_NET_IB_REQ_EAGER) << "message " << m;
    std::string err;
    ASSERT_TRUE(netWait(ib, s, nullptr, deadlineIn(10000), &err)) << err;
    if (m == 0) {
      EXPECT_EQ(se->c.buf, nullptr) << "the sender took bounce slots for the first message";
      EXPECT_EQ(re->c.buf, nullptr) << "the receiver took a ring before the first message was delivered";
    }
    if (m == 0) r = irecv(0, 64);
    ASSERT_NE(r, nullptr);
    int got = -1;
    ASSERT_TRUE(netWait(ib, r, &got, deadlineIn(10000), &err)) << err;
    EXPECT_EQ(got, 8);
    for (int b = 0; b < 8; b++) ASSERT_EQ(rbuf[b], (char)(0x31 + m)) << "message " << m << " byte " << b;
    if (m == 0) {
      EXPECT_EQ(re->firstAt, 1u) << "the first message did not come into the box";
      EXPECT_EQ(re->c.buf, nullptr) << "its delivery took the ring (a registration on its way)";
    }
  }
  EXPECT_NE(se->c.buf, nullptr) << "the second message went without bounce slots";
  EXPECT_EQ(re->eagerIn, 2u);
}

// A sender breaking NCCL's rule (a message larger than the receive: 2000 bytes into 100,
// beyond the eager size) would wait for a clear-to-send that a small receive does not send:
// its request-to-send (lazy clear-to-send) has the receive announce itself, and the sender's
// isend fails with the WARN that names the sizes, instead of never returning a request.
// (A peer without requests-to-send gets the entry after RAILNET_IB_EAGER_LATE_MS.)
TEST_F(IbEagerSoftRoceTest, MessageLargerThanASmallReceiveEndsWithAWarnNotAHang) {
  connect("1024");
  LogCapture cap;
  void* r = irecv(0, 100);
  ASSERT_NE(r, nullptr);
  long long dl = deadlineIn(10000);
  ncclResult_t res = ncclSuccess;
  void* s = nullptr;
  while (s == nullptr && res == ncclSuccess && netNowNs() < dl) {
    res = ib->isend(sc, sbuf.data(), 2000, 7, smh, nullptr, &s);
    int done = 0;
    ASSERT_EQ(ib->test(r, &done, nullptr), ncclSuccess);  // the receiver's progress
    ASSERT_EQ(done, 0);
  }
  EXPECT_EQ(res, ncclInvalidUsage) << LogCapture::all();
  EXPECT_EQ(s, nullptr);
  EXPECT_TRUE(LogCapture::contains("receive smaller than send")) << LogCapture::all();
  EXPECT_EQ(((struct ncclIbSendComm*)sc)->eager->c.rtsCount, 1u);
}

// The receiver's comm closed (its QPs gone): the sender's eager isends complete when posted,
// but once the ring is full (no credits come back) its polled completions show the failed
// signaled writes, and isend / test fail with the completion's WARN within the retry time,
// instead of returning "later" for ever.
// At a short retry budget the failed writes tell first; at NCCL's defaults (34 s of retries,
// for ever on soft-RoCE) the receiver's closed connection does, within about a second.
class IbEagerGoneReceiver : public IbEagerSoftRoceTest, public ::testing::WithParamInterface<bool> {};

TEST_P(IbEagerGoneReceiver, FailsTheSenderInBoundedTime) {
  bool atDefaults = GetParam();
  env.set("NCCL_IB_TIMEOUT", atDefaults ? nullptr : "12");
  env.set("NCCL_IB_RETRY_CNT", atDefaults ? nullptr : "1");
  connect("1024");
  ASSERT_EQ(ib->deregMr(rc, rmh), ncclSuccess);
  rmh = nullptr;
  ASSERT_EQ(ib->closeRecv(rc), ncclSuccess);
  rc = nullptr;
  LogCapture cap;
  long long dl = deadlineIn(30000);
  ncclResult_t res = ncclSuccess;
  int completed = 0;
  while (res == ncclSuccess && netNowNs() < dl) {
    void* req = nullptr;
    res = ib->isend(sc, sbuf.data(), 8, 7, smh, nullptr, &req);
    int done = 0;
    if (res == ncclSuccess && req) res = ib->test(req, &done, nullptr);
    completed += done;
  }
  EXPECT_NE(res, ncclSuccess) << "the sender never noticed the receiver is gone";
  EXPECT_LE(completed, RAILNET_IB_EAGER_SLOTS) << "more eager messages than the ring holds went out";
  if (atDefaults)
    EXPECT_TRUE(LogCapture::contains("closed its connection to this send comm", NCCL_LOG_WARN)) << LogCapture::all();
  else
    EXPECT_TRUE(LogCapture::contains("Got completion from peer", NCCL_LOG_WARN)) << LogCapture::all();
}

INSTANTIATE_TEST_SUITE_P(Timeouts, IbEagerGoneReceiver, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "NcclDefaults" : "Short"; });

// A send buffer registered as GPU memory never goes eagerly (the CPU would copy from it):
// into a small receive it waits for the clear-to-send entry, which its request-to-send has
// that receive write, and the bytes go straight from the NIC. (Host memory registered
// with the CUDA type stands in for GPU memory; a NIC that checks the type may refuse it.)
TEST_F(IbEagerSoftRoceTest, GpuMemoryNeverGoesEagerly) {
  connect("1024");
  void* gpuMh = nullptr;
  if (ib->regMr(sc, sbuf.data() + 4096, 4096, NCCL_PTR_CUDA, &gpuMh) != ncclSuccess) {
    RAILNET_SKIP("regMr with NCCL_PTR_CUDA of host memory refused here");
  }
  memset(sbuf.data() + 4096, 0x33, 64);
  void* r = irecv(0, 64);
  ASSERT_NE(r, nullptr);
  void* s = nullptr;
  ASSERT_EQ(ib->isend(sc, sbuf.data() + 4096, 64, 7, gpuMh, nullptr, &s), ncclSuccess);
  EXPECT_EQ(s, nullptr) << "GPU memory went eagerly";
  long long dl = deadlineIn(10000);
  while (s == nullptr && netNowNs() < dl) {
    ASSERT_EQ(ib->isend(sc, sbuf.data() + 4096, 64, 7, gpuMh, nullptr, &s), ncclSuccess);
    int done = 0;
    if (s == nullptr) {
      ASSERT_EQ(ib->test(r, &done, nullptr), ncclSuccess);  // the receiver's progress
    }
  }
  ASSERT_NE(s, nullptr) << "the clear-to-send entry never came";
  EXPECT_EQ(((struct ncclIbSendComm*)sc)->eager->c.rtsCount, 1u) << "asked with a request-to-send";
  std::string err;
  int got = -1;
  ASSERT_TRUE(netWait(ib, s, nullptr, deadlineIn(10000), &err)) << err;
  ASSERT_TRUE(netWait(ib, r, &got, deadlineIn(10000), &err)) << err;
  EXPECT_EQ(got, 64);
  for (int b = 0; b < 64; b++) ASSERT_EQ(rbuf[b], 0x33) << b;
  ib->deregMr(sc, gpuMh);
}

// NCCL's sends with GPUDirect RDMA: small messages from GPU memory (never eager) into irecv
// buffers of 64 KiB, one after the other, at the default eager size. After
// RAILNET_IB_EAGER_RETRY of them through a clear-to-send the receiver tries without and the
// next one asks with a request-to-send saying its memory cannot go eagerly; each such request
// doubles the wait before the next try (up to RAILNET_IB_EAGER_RETRY_MAX). 300 messages: tries
// after 16, 32, 64 and 128 more, so 4 requests-to-send (17 without the doubling).
TEST_F(IbEagerSoftRoceTest, GpuMemorySendsAskLessAndLessOften) {
  env.set("RAILNET_IB_EAGER_SIZE", nullptr);
  initTwoDevices();
  ASSERT_EQ(ib->listen(ctx, 1, handle, &lc), ncclSuccess);
  ASSERT_TRUE(netConnectPair(ib, ctx, 0, handle, lc, &sc, &rc, 60000));
  sbuf.assign(1 << 16, 0);
  rbuf.assign(1 << 16, 0);
  ASSERT_EQ(ib->regMr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh), ncclSuccess);
  void* gpuMh = nullptr;
  if (ib->regMr(sc, sbuf.data(), sbuf.size(), NCCL_PTR_CUDA, &gpuMh) != ncclSuccess) {
    RAILNET_SKIP("regMr with NCCL_PTR_CUDA of host memory refused here");
  }
  struct railnetIbEagerRecv* re = ((struct ncclIbRecvComm*)rc)->eager;
  ASSERT_NE(re, nullptr) << "eager messages are not on at the defaults";
  for (int i = 0; i < 300; i++) {
    memset(sbuf.data(), (char)(i + 1), 64);
    void* r = irecv(0, 1 << 16);
    ASSERT_NE(r, nullptr);
    void *s = nullptr;
    int rdone = 0, got = -1;
    long long dl = deadlineIn(10000);
    while (s == nullptr && netNowNs() < dl) {  // the receiver tested meanwhile, as NCCL's proxy does
      ASSERT_EQ(ib->isend(sc, sbuf.data(), 64, 7, gpuMh, nullptr, &s), ncclSuccess);
      if (s == nullptr && !rdone) {
        ASSERT_EQ(ib->test(r, &rdone, &got), ncclSuccess);
      }
    }
    ASSERT_NE(s, nullptr) << "message " << i;
    ASSERT_NE(((struct ncclIbRequest*)s)->type, NCCL_NET_IB_REQ_EAGER) << "GPU memory went eagerly";
    std::string err;
    ASSERT_TRUE(netWait(ib, s, nullptr, deadlineIn(10000), &err)) << err;
    if (!rdone) {
      ASSERT_TRUE(netWait(ib, r, &got, deadlineIn(10000), &err)) << err;
    }
    ASSERT_EQ(got, 64);
    for (int b = 0; b < 64; b++) ASSERT_EQ(rbuf[b], (char)(i + 1)) << "message " << i << " byte " << b;
  }
  EXPECT_GE(re->c.rtsCount, 1u) << "the receiver never tried without a clear-to-send";
  EXPECT_LE(re->c.rtsCount, 5u) << "the tries did not grow rarer";
  EXPECT_EQ(re->retryAfter, 256);
  ib->deregMr(sc, gpuMh);
}

// NCCL's receive pattern: irecv buffers of 64 KiB, larger than the messages, posted before
// them. With lazy clear-to-send (both ends this railnet) the receiver writes no clear-to-send
// while the messages are small (after RAILNET_IB_EAGER_RETRY small ones through a
// clear-to-send: a comm starts with them): an 8-byte message costs the receiver one work
// request (its receive reposted) and a credit write per half ring, no clear-to-send write. A
// larger message then finds none and asks with a request-to-send, answered at once when its
// irecv is there and at the irecv when the request came first; the larger ones after it find
// their clear-to-send (no request), and small messages go eagerly again after
// RAILNET_IB_EAGER_RETRY. Every byte checked. One thread drives both ends, as NCCL's proxy
// does (the receiver's test() takes the requests).
TEST_F(IbEagerSoftRoceTest, LargeReceiveBuffersTakeSmallMessagesWithoutClearToSend) {
  connect("1024");
  auto* se = ((struct ncclIbSendComm*)sc)->eager;
  auto* re = ((struct ncclIbRecvComm*)rc)->eager;
  ASSERT_NE(se, nullptr);
  ASSERT_NE(re, nullptr);
  ASSERT_EQ(re->c.stride, 1088u) << "ring slots: an 8-byte header and 1024 bytes, rounded up to 64";
  int k = 0;
  // irecv of 64 KiB (unless the message's isend went first), then isend and test() both
  auto one = [&](size_t size, void* r) -> std::string {
    char fill = (char)(++k * 13 + 1);
    memset(sbuf.data(), fill, size);
    if (r == nullptr) r = irecv(0, 65536);
    if (r == nullptr) return "irecv not taken";
    void* s = nullptr;
    int sdone = 0, rdone = 0, got = -1;
    long long dl = deadlineIn(20000);
    while ((!sdone || !rdone) && netNowNs() < dl) {
      if (s == nullptr && ib->isend(sc, sbuf.data(), size, 7, smh, nullptr, &s) != ncclSuccess) return "isend failed";
      if (s && !sdone && ib->test(s, &sdone, nullptr) != ncclSuccess) return "send test failed";
      if (!rdone && ib->test(r, &rdone, &got) != ncclSuccess) return "receive test failed";
    }
    if (!sdone || !rdone) return "message " + std::to_string(k) + " of " + std::to_string(size) + " bytes hung";
    if (got != (int)size) return "size " + std::to_string(got);
    for (size_t b = 0; b < size; b++)
      if (rbuf[b] != fill) return "byte " + std::to_string(b) + " of message " + std::to_string(k);
    return "";
  };
  for (int i = 0; i < RAILNET_IB_EAGER_RETRY; i++) ASSERT_EQ(one(8, nullptr), "");  // through clear-to-send
  EXPECT_EQ(re->small, 1) << "small messages through a clear-to-send did not turn it lazy";
  const int n = 100;
  uint64_t w0 = rbase()->work.wrs;
  for (int i = 0; i < n; i++) ASSERT_EQ(one(8, nullptr), "") << LogCapture::all();
  double recvWrs = (double)(rbase()->work.wrs - w0) / n;
  printf("lazy clear-to-send, 8 bytes into 64 KiB irecvs: receiver %.2f work requests per message\n", recvWrs);
  EXPECT_LE(recvWrs, 1.0 + 2.0 / RAILNET_IB_EAGER_SLOTS + 0.01) << "a clear-to-send per message";
  EXPECT_EQ(se->c.rtsCount, 0u);
  // a larger message, its irecv first: a request-to-send, answered at once
  ASSERT_EQ(one(32768, nullptr), "");
  EXPECT_EQ(se->c.rtsCount, 1u);
  EXPECT_EQ(re->c.rtsCount, 1u);
  // the next ones find their clear-to-send
  ASSERT_EQ(one(32768, nullptr), "");
  ASSERT_EQ(one(65536, nullptr), "");
  EXPECT_EQ(se->c.rtsCount, 1u) << "a request-to-send although the irecv wrote its clear-to-send";
  // in that mode (the receiver's mode word tells the sender every irecv writes its
  // clear-to-send) a message whose irecv is not posted yet waits without asking
  EXPECT_EQ(((struct ncclIbSendComm*)sc)->eagerCredit.mode & 1, 1u) << "the sender was not told";
  {
    memset(sbuf.data(), 0x5a, 20000);
    void* s2 = nullptr;
    ASSERT_EQ(ib->isend(sc, sbuf.data(), 20000, 7, smh, nullptr, &s2), ncclSuccess);
    EXPECT_EQ(s2, nullptr);
    EXPECT_EQ(se->c.rtsCount, 1u) << "a request-to-send although the irecv will write its clear-to-send";
    void* r2 = irecv(0, 65536);
    ASSERT_NE(r2, nullptr);
    long long dl2 = deadlineIn(10000);
    while (s2 == nullptr && netNowNs() < dl2)
      ASSERT_EQ(ib->isend(sc, sbuf.data(), 20000, 7, smh, nullptr, &s2), ncclSuccess);
    ASSERT_NE(s2, nullptr) << "the irecv's clear-to-send never came";
    std::string err2;
    int got2 = -1;
    ASSERT_TRUE(netWait(ib, s2, nullptr, deadlineIn(10000), &err2)) << err2;
    ASSERT_TRUE(netWait(ib, r2, &got2, deadlineIn(10000), &err2)) << err2;
    EXPECT_EQ(got2, 20000);
    for (int b = 0; b < 20000; b++) ASSERT_EQ(rbuf[b], 0x5a) << b;
    EXPECT_EQ(se->c.rtsCount, 1u);
  }
  // small again: through their clear-to-send, then lazy again and eagerly
  EXPECT_EQ(re->small, 0);
  for (int i = 0; i < RAILNET_IB_EAGER_RETRY + 1; i++) ASSERT_EQ(one(8, nullptr), "");
  EXPECT_EQ(re->small, 1);
  w0 = rbase()->work.wrs;
  for (int i = 0; i < 16; i++) ASSERT_EQ(one(8, nullptr), "");
  EXPECT_LE((double)(rbase()->work.wrs - w0) / 16, 1.0 + 2.0 / RAILNET_IB_EAGER_SLOTS + 0.01);
  EXPECT_EQ(se->c.rtsCount, 1u);
  // a larger message before its irecv: the request-to-send waits for the irecv
  memset(sbuf.data(), 0x77, 40000);
  void* s = nullptr;
  ASSERT_EQ(ib->isend(sc, sbuf.data(), 40000, 7, smh, nullptr, &s), ncclSuccess);
  EXPECT_EQ(s, nullptr) << "a larger message went without a clear-to-send";
  EXPECT_EQ(se->c.rtsCount, 2u);
  long long dl = deadlineIn(10000);
  while (re->c.rtsCount < 2 && netNowNs() < dl) {
    int nc = 0;
    ASSERT_EQ(railnetIbPollDev(rbase(), 0, &nc), ncclSuccess);
  }
  ASSERT_EQ(re->c.rtsCount, 2u) << "the request-to-send never arrived";
  void* r = irecv(0, 65536);
  ASSERT_NE(r, nullptr);
  std::string err;
  int got = -1;
  dl = deadlineIn(10000);
  while (s == nullptr && netNowNs() < dl) ASSERT_EQ(ib->isend(sc, sbuf.data(), 40000, 7, smh, nullptr, &s), ncclSuccess);
  ASSERT_NE(s, nullptr) << "the irecv did not answer the request-to-send";
  ASSERT_TRUE(netWait(ib, s, nullptr, deadlineIn(10000), &err)) << err;
  ASSERT_TRUE(netWait(ib, r, &got, deadlineIn(10000), &err)) << err;
  EXPECT_EQ(got, 40000);
  for (int b = 0; b < 40000; b++) ASSERT_EQ(rbuf[b], 0x77) << b;
  EXPECT_EQ(se->c.rtsCount, 2u);
}

// irecvs posted ahead while small messages come eagerly write no clear-to-send; messages
// into them alternate large and small: each large one asks with a request-to-send, also the
// one after an eager message came between (the receiver's mode then vouches only for the
// irecvs of its clear-to-send period, not for the ones posted before it): none waits for the
// 1-s late rule.
TEST_F(IbEagerSoftRoceTest, IrecvsPostedAheadAreAskedWhateverCameBetween) {
  connect("1024");
  auto* se = ((struct ncclIbSendComm*)sc)->eager;
  ASSERT_NE(se, nullptr);
  // into the lazy mode: RAILNET_IB_EAGER_RETRY small messages through a clear-to-send
  for (int i = 0; i < RAILNET_IB_EAGER_RETRY + 1; i++) {
    void* r = irecv(0, 65536);
    void* s = isend(0, 8, deadlineIn(10000));
    ASSERT_NE(s, nullptr);
    std::string err;
    ASSERT_TRUE(netWait(ib, s, nullptr, deadlineIn(10000), &err)) << err;
    ASSERT_TRUE(netWait(ib, r, nullptr, deadlineIn(10000), &err)) << err;
  }
  ASSERT_EQ(((struct ncclIbRecvComm*)rc)->eager->small, 1);
  const size_t sizes[4] = {20000, 8, 20000, 8};
  std::vector<void*> rs;
  for (int i = 0; i < 4; i++) rs.push_back(irecv((size_t)i * 65536, 65536));
  uint64_t rts0 = se->c.rtsCount;
  for (int i = 0; i < 4; i++) {
    memset(sbuf.data() + (size_t)i * 65536, 0x21 + i, sizes[i]);
    void* s = nullptr;
    long long dl = deadlineIn(10000);
    while (s == nullptr && netNowNs() < dl) {
      ASSERT_EQ(ib->isend(sc, sbuf.data() + (size_t)i * 65536, sizes[i], 7, smh, nullptr, &s), ncclSuccess);
      int done = 0;
      for (void* r : rs) {  // the receiver's progress (its requests-to-send answered)
        if (r && s == nullptr) {
          ASSERT_EQ(ib->test(r, &done, nullptr), ncclSuccess);
        }
      }
    }
    ASSERT_NE(s, nullptr) << "message " << i;
    std::string err;
    ASSERT_TRUE(netWait(ib, s, nullptr, deadlineIn(10000), &err)) << err;
    int got = -1;
    ASSERT_TRUE(netWait(ib, rs[i], &got, deadlineIn(10000), &err)) << err;
    rs[i] = nullptr;
    EXPECT_EQ(got, (int)sizes[i]);
    for (size_t b = 0; b < sizes[i]; b++) ASSERT_EQ(rbuf[(size_t)i * 65536 + b], (char)(0x21 + i)) << i;
  }
  EXPECT_EQ(se->c.rtsCount, rts0 + 2) << "a large message waited without asking (for the late rule)";
}

// A receive buffer registered as GPU memory is written by the NIC, not by the CPU: the
// receiver's QP connected to itself RDMA-writes the message from its ring slot, whether the
// irecv came first or the message waited in the ring; the irecv is done once that write
// completed, and an iflush after it completes. Host memory registered with the CUDA type
// stands in for GPU memory. With a peer-memory module faked in sysfs (GPUDirect RDMA
// available, flush QP made at setup: the receiver still agrees to eager messages) and
// without one (the loopback QP made at the first copy).
class IbEagerGpuReceive : public IbEagerSoftRoceTest, public ::testing::WithParamInterface<bool> {};

TEST_P(IbEagerGpuReceive, IsCopiedByTheNic) {
  const bool gdr = GetParam();
  TempDir sys;
  if (gdr) {
    for (const char* d : {"class", "devices", "bus"})
      ASSERT_EQ(symlink((std::string("/sys/") + d).c_str(), (sys.path() + "/" + d).c_str()), 0);
    sys.write("module/nvidia_peermem/version", "1.0\n");
    env.set("SYSFS_PATH", sys.path().c_str());
  }
  railnetIbGdrReset();
  LogCapture cap;
  connect("1024");
  if (HasFatalFailure()) return;
  auto* r = (struct ncclIbRecvComm*)rc;
  ASSERT_NE(r->eager, nullptr) << "the receiver did not agree to eager messages: " << LogCapture::all();
  EXPECT_EQ(r->flushEnabled, gdr ? 1 : 0);
  EXPECT_EQ(rbase()->devs[0].flushQp != nullptr, gdr) << "a loopback QP before the first copy";
  void* gpuMh = nullptr;
  if (ib->regMr(rc, rbuf.data() + 65536, 65536, NCCL_PTR_CUDA, &gpuMh) != ncclSuccess) {
    RAILNET_SKIP("regMr with NCCL_PTR_CUDA of host memory refused here");
  }
  for (int k = 0; k < 2; k++) {  // 0: the irecv first; 1: the message waits in the ring
    SCOPED_TRACE(k ? "message before the irecv" : "irecv before the message");
    char* dst = rbuf.data() + 65536 + k * 4096;
    memset(dst, 0, 200);
    memset(sbuf.data() + k * 4096, 0x50 + k, 100);
    void* data = dst;
    size_t posted = 200;
    int tag = 7;
    void* rq = nullptr;
    if (k == 0) {
      ASSERT_EQ(ib->irecv(rc, 1, &data, &posted, &tag, &gpuMh, nullptr, &rq), ncclSuccess);
    }
    void* s = isend(k * 4096, 100, deadlineIn(10000));
    ASSERT_NE(s, nullptr);
    if (k == 1) {
      uint64_t pos = rbase()->fifoHead;
      long long dl = deadlineIn(10000);
      while (r->eager->arrived[pos % RAILNET_IB_EAGER_SLOTS] != pos + 1 && netNowNs() < dl) {
        int n = 0;
        ASSERT_EQ(railnetIbPollDev(rbase(), 0, &n), ncclSuccess);
      }
      ASSERT_EQ(r->eager->arrived[pos % RAILNET_IB_EAGER_SLOTS], pos + 1) << "the message never reached the ring";
      ASSERT_EQ(ib->irecv(rc, 1, &data, &posted, &tag, &gpuMh, nullptr, &rq), ncclSuccess);
    }
    ASSERT_NE(rq, nullptr);
    std::string err;
    int got = -1;
    ASSERT_TRUE(netWait(ib, s, nullptr, deadlineIn(10000), &err)) << err;
    ASSERT_TRUE(netWait(ib, rq, &got, deadlineIn(10000), &err)) << err << LogCapture::all();
    EXPECT_EQ(got, 100);
    for (int b = 0; b < 100; b++) ASSERT_EQ(dst[b], (char)(0x50 + k)) << "byte " << b;
    EXPECT_EQ(dst[100], 0) << "the copy wrote beyond the message";
    EXPECT_EQ(r->eager->nicCopies, (uint64_t)k + 1) << "the CPU, not the NIC, copied into the GPU buffer";
    if (gdr) {
      void* freq = nullptr;
      int fsize = 100;
      ASSERT_EQ(ib->iflush(rc, 1, &data, &fsize, &gpuMh, &freq), ncclSuccess);
      ASSERT_NE(freq, nullptr);
      EXPECT_TRUE(netWait(ib, freq, nullptr, deadlineIn(10000), &err)) << err;
    }
  }
  EXPECT_NE(rbase()->devs[0].flushQp, nullptr);
  exchange(3, 8);  // host buffers: the CPU copies, as before
  EXPECT_EQ(r->eager->nicCopies, 2u);
  ib->deregMr(rc, gpuMh);
  if (gdr) env.unset("SYSFS_PATH");
  railnetIbGdrReset();
}

INSTANTIATE_TEST_SUITE_P(Gdr, IbEagerGpuReceive, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "PeerMemory" : "NoPeerMemory"; });

// NCCL's multi-receive on an eager comm (maxRecvs stays 8). Singles go eagerly; then the sender
// runs ahead of the receiver's irecvs (tags 1, 2, 1 eagerly), and the receiver posts irecvs of
// two buffers (tags 1 and 2, larger than the messages), NCCL's grouped receive on a shared comm.
// The first one closes the comm's eager messages: it takes no request until the sender's close
// is in; the messages that came ahead go, by tag and in order, into the groups' buffers (the
// first group entirely, the second one's tag-1 buffer), the others get clear-to-send entries;
// then ten rounds of the clear-to-send protocol, tag 2 sent before tag 1, one message above the
// eager size. Every byte and every buffer's size checked. The receive buffers are host memory
// (the CPU copies the messages that came ahead) or registered as GPU memory (the NIC does); one
// QP, two (messages round robin: the close waits for the ones before it on the other QP), or
// three with messages split over them (eager ones whole on the first, marks on the others).
class IbEagerMultiReceive : public IbEagerSoftRoceTest, public ::testing::WithParamInterface<int> {};

TEST_P(IbEagerMultiReceive, ClosesEagerMessagesAndTakesTheOnesAhead) {
  const bool gpu = GetParam() == 1;
  if (GetParam() == 2) env.set("NCCL_IB_QPS_PER_CONNECTION", "2");
  if (GetParam() == 3) {
    env.set("NCCL_IB_QPS_PER_CONNECTION", "3");
    env.set("NCCL_IB_SPLIT_DATA_ON_QPS", "1");
  }
  connect("1024");
  if (HasFatalFailure()) return;
  void* groupMh = rmh;
  if (gpu && ib->regMr(rc, rbuf.data(), rbuf.size(), NCCL_PTR_CUDA, &groupMh) != ncclSuccess) {
    RAILNET_SKIP("regMr with NCCL_PTR_CUDA of host memory refused here");
  }
  ncclNetProperties_t props;
  ASSERT_EQ(ib->getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.maxRecvs, 8);
  exchange(5, 64);
  auto* re = ((struct ncclIbRecvComm*)rc)->eager;
  ASSERT_GE(re->released, 5u) << "the singles did not go eagerly";
  struct Msg {
    int tag;
    size_t size;
  };
  std::vector<Msg> sends = {{1, 100}, {2, 200}, {1, 300}, {2, 400}};
  for (int r = 0; r < 10; r++) {
    sends.push_back({2, (size_t)(1000 + r)});
    sends.push_back({1, (size_t)(5000 + r)});
  }
  const int groups = 12;
  const size_t slot = 8192;  // each message's source and each buffer: its own 8 KiB
  auto fill = [](size_t k) { return (char)(k * 29 + 3); };
  // what buffer (group g, tag t) gets: the g-th message of tag t
  std::vector<std::vector<size_t>> ofTag(3);
  for (size_t k = 0; k < sends.size(); k++) ofTag[sends[k].tag].push_back(k);
  LogCapture cap;
  long long dl = deadlineIn(60000);
  std::vector<void*> sreq(sends.size(), nullptr), rreq(groups, nullptr);
  std::vector<bool> sdone(sends.size(), false), rdone(groups, false);
  size_t si = 0;
  int gi = 0;
  auto sendNext = [&]() {
    if (si >= sends.size()) return;
    char* src = sbuf.data() + si * slot;
    memset(src, fill(si), sends[si].size);
    ASSERT_EQ(ib->isend(sc, src, sends[si].size, sends[si].tag, smh, nullptr, &sreq[si]), ncclSuccess);
    if (sreq[si]) si++;
  };
  while (si < 3 && netNowNs() < dl) sendNext();  // ahead of any irecv: eagerly
  for (size_t k = 0; k < 3; k++)
    ASSERT_EQ(((struct ncclIbRequest*)sreq[k])->type, NCCL_NET_IB_REQ_EAGER) << "message " << k << " waited";
  int left = groups + (int)sends.size();
  while (left > 0 && netNowNs() < dl) {
    if (gi < groups) {
      void* data[2] = {rbuf.data() + (2 * gi) * slot, rbuf.data() + (2 * gi + 1) * slot};
      size_t sizes[2] = {slot, slot};
      int tags[2] = {1, 2};
      void* mh[2] = {groupMh, groupMh};
      ASSERT_EQ(ib->irecv(rc, 2, data, sizes, tags, mh, nullptr, &rreq[gi]), ncclSuccess);
      if (rreq[gi]) gi++;
    }
    sendNext();
    for (size_t k = 0; k < si; k++) {
      int done = 0;
      if (sdone[k]) continue;
      ASSERT_EQ(ib->test(sreq[k], &done, nullptr), ncclSuccess) << "send " << k;
      if (done) sdone[k] = true, left--;
    }
    for (int g = 0; g < gi; g++) {
      int done = 0, got[2] = {-1, -1};
      if (rdone[g]) continue;
      ASSERT_EQ(ib->test(rreq[g], &done, got), ncclSuccess) << "group " << g;
      if (!done) continue;
      rdone[g] = true;
      left--;
      for (int j = 0; j < 2; j++) {
        size_t k = ofTag[j + 1][g];
        ASSERT_EQ(got[j], (int)sends[k].size) << "group " << g << " buffer " << j;
        const char* b = rbuf.data() + (2 * g + j) * slot;
        for (size_t x = 0; x < sends[k].size; x++)
          ASSERT_EQ(b[x], fill(k)) << "group " << g << " buffer " << j << " byte " << x;
      }
    }
  }
  ASSERT_EQ(left, 0) << "not done in 60 s: " << si << " sends, " << gi << " groups started";
  EXPECT_TRUE(LogCapture::contains("a multi-receive: asking the sender to end its eager messages")) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("eager messages ended at fifo position")) << LogCapture::all();
  // the three sent ahead came beyond the irecvs, and as many more as went eagerly before the
  // sender saw the receiver's request to close (how many depends on when that write landed)
  int beyond = -1;
  for (const auto& l : LogCapture::lines()) {
    size_t at = l.msg.find(" came beyond the irecvs)");
    size_t open = at == std::string::npos ? at : l.msg.rfind('(', at);
    if (open != std::string::npos) beyond = atoi(l.msg.c_str() + open + 1);
  }
  EXPECT_GE(beyond, 3) << "the messages sent ahead did not wait for the groups: " << LogCapture::all();
  EXPECT_TRUE(re->c.closed);
  if (gpu) {
    EXPECT_GE(re->nicCopies, 3u) << "the NIC did not copy the messages into the GPU buffers";
    ib->deregMr(rc, groupMh);
  }
  exchange(5, 64);  // singles still work, through their clear-to-send
}

INSTANTIATE_TEST_SUITE_P(Buffers, IbEagerMultiReceive, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(i.param == 0 ? "Host" : i.param == 1 ? "Gpu" : i.param == 2 ? "TwoQps"
                                                                                                         : "SplitOverThreeQps");
                         });

// NCCL's pattern on a comm it shares between peers, at the defaults: irecvs of 8 step buffers
// of 64 KiB, one tag each, larger than the messages, whose sizes go around the eager size
// (0, 8, 4095, 4096, 4097, 65536 ...); three messages go ahead of the first irecv (eagerly),
// the isends of odd groups come in the reverse order of their tags. The first group ends the
// comm's eager messages (eager.h): the three that came ahead fill its buffers of their tags,
// everything else goes through clear-to-send entries. Every size test() reports and every
// byte is checked.
TEST_F(IbEagerSoftRoceTest, GroupsOfEightStepBuffersAtTheDefaults) {
  connectWith(nullptr);
  if (HasFatalFailure()) return;
  auto* re = ((struct ncclIbRecvComm*)rc)->eager;
  ASSERT_NE(re, nullptr) << "no eager messages at the defaults: " << LogCapture::all();
  ASSERT_EQ(re->c.size, (uint32_t)RAILNET_IB_EAGER_DEFAULT);
  const int nb = 8, groups = 12, inFlight = 2;
  const size_t step = 65536;  // rbuf: inFlight groups of nb step buffers
  const size_t n = RAILNET_IB_EAGER_DEFAULT;
  const size_t sizeList[] = {0, 8, n - 1, n, n + 1, 64, step, 1000, 2 * n, 3};
  auto sizeOf = [&](int g, int b) { return sizeList[(g * 3 + b) % (sizeof(sizeList) / sizeof(sizeList[0]))]; };
  auto fill = [](int g, int b, size_t x) { return (char)(g * 31 + b * 7 + x * 13 + 1); };
  std::vector<char> src((size_t)inFlight * nb * step);  // the sources of the groups in flight
  void* srcMh = nullptr;
  ASSERT_EQ(ib->regMr(sc, src.data(), src.size(), NCCL_PTR_HOST, &srcMh), ncclSuccess);
  LogCapture cap;
  long long dl = deadlineIn(120000);
  struct Group {
    void* rreq = nullptr;
    void* sreq[8] = {};
    bool sdone[8] = {}, rdone = false;
  };
  std::vector<Group> gs(groups);
  int posted = 0, sendG = 0, sendI = 0, finished = 0;
  std::string err;
  auto srcOf = [&](int g, int b) { return src.data() + ((size_t)(g % inFlight) * nb + b) * step; };
  auto trySend = [&]() -> bool {  // the next isend in order; false: none taken now
    if (sendG >= groups || sendG >= finished + inFlight) return false;
    int b = (sendG % 2) ? nb - 1 - sendI : sendI;
    size_t size = sizeOf(sendG, b);
    char* s = srcOf(sendG, b);
    for (size_t x = 0; x < size; x++) s[x] = fill(sendG, b, x);
    void* req = nullptr;
    EXPECT_EQ(ib->isend(sc, s, size, b, srcMh, nullptr, &req), ncclSuccess);
    if (req == nullptr) return false;
    gs[sendG].sreq[b] = req;
    if (++sendI == nb) sendI = 0, sendG++;
    return true;
  };
  for (int k = 0; k < 3; k++)  // ahead of any irecv
    while (!trySend() && netNowNs() < dl) {
    }
  for (int b = 0; b < 3; b++)
    ASSERT_EQ(((struct ncclIbRequest*)gs[0].sreq[b])->type, NCCL_NET_IB_REQ_EAGER) << "message " << b << " waited";
  while (finished < groups && netNowNs() < dl && !HasFailure()) {
    if (posted < groups && posted < finished + inFlight) {
      void* data[8];
      size_t sizes[8];
      int tags[8];
      void* mh[8];
      for (int b = 0; b < nb; b++) {
        data[b] = rbuf.data() + ((size_t)(posted % inFlight) * nb + b) * step;
        memset(data[b], 0, step);
        sizes[b] = step;
        tags[b] = b;
        mh[b] = rmh;
      }
      ASSERT_EQ(ib->irecv(rc, nb, data, sizes, tags, mh, nullptr, &gs[posted].rreq), ncclSuccess);
      if (gs[posted].rreq) posted++;
    }
    trySend();
    for (int g = finished; g < posted; g++) {
      Group& G = gs[g];
      for (int b = 0; b < nb; b++) {
        int done = 0;
        if (G.sreq[b] == nullptr || G.sdone[b]) continue;
        ASSERT_EQ(ib->test(G.sreq[b], &done, nullptr), ncclSuccess) << "group " << g << " send " << b;
        G.sdone[b] = done != 0;
      }
      if (!G.rdone) {
        int done = 0, got[8];
        ASSERT_EQ(ib->test(G.rreq, &done, got), ncclSuccess) << "group " << g;
        if (done) {
          G.rdone = true;
          for (int b = 0; b < nb; b++) {
            ASSERT_EQ(got[b], (int)sizeOf(g, b)) << "group " << g << " buffer " << b;
            const char* d = rbuf.data() + ((size_t)(g % inFlight) * nb + b) * step;
            for (size_t x = 0; x < sizeOf(g, b); x++)
              ASSERT_EQ(d[x], fill(g, b, x)) << "group " << g << " buffer " << b << " byte " << x;
          }
        }
      }
    }
    while (finished < posted && gs[finished].rdone) {
      bool all = true;
      for (int b = 0; b < nb; b++) all = all && gs[finished].sdone[b];
      if (!all) break;
      finished++;
    }
  }
  ib->deregMr(sc, srcMh);
  ASSERT_EQ(finished, groups) << "not done in 120 s: " << posted << " groups posted, " << sendG << " sent";
  EXPECT_TRUE(re->c.closed) << "the groups did not end the comm's eager messages";
  EXPECT_TRUE(LogCapture::contains("eager messages ended at fifo position")) << LogCapture::all();
  EXPECT_GE(re->released, 3u) << "the three messages sent ahead did not come eagerly";
}

// An isend whose tag is not the one of the irecv at its fifo position. The clear-to-send
// protocol holds it at the sender until an irecv of its tag is announced; an eager message
// has no entry to match, so the receiver checks the tag in its header and fails the comm with
// a WARN naming both tags, whether the irecv came first or the message did. No byte of the
// irecv's buffer is written.
class IbEagerWrongTag : public IbEagerSoftRoceTest, public ::testing::WithParamInterface<bool> {};

TEST_P(IbEagerWrongTag, FailsTheCommInsteadOfFillingTheBuffer) {
  const bool messageFirst = GetParam();
  connect("1024");
  if (HasFatalFailure()) return;
  const uint64_t pos = rbase()->fifoHead;  // after the warm-up's message
  memset(rbuf.data(), 0x5a, 64);
  memset(sbuf.data(), 0x11, 64);
  LogCapture cap;
  long long dl = deadlineIn(10000);
  void* r = nullptr;
  if (!messageFirst) {
    r = irecv(0, 64);
    ASSERT_NE(r, nullptr);
  }
  void* s = nullptr;
  while (s == nullptr && netNowNs() < dl) ASSERT_EQ(ib->isend(sc, sbuf.data(), 64, 8, smh, nullptr, &s), ncclSuccess);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(((struct ncclIbRequest*)s)->type, NCCL_NET_IB_REQ_EAGER) << "the message did not go eagerly";
  ncclResult_t res = ncclSuccess;
  if (messageFirst) {  // the message waits in the ring; then the irecv of tag 7 for its position
    auto* re = ((struct ncclIbRecvComm*)rc)->eager;
    while (re->arrived[pos % RAILNET_IB_EAGER_SLOTS] == 0 && netNowNs() < dl)
      for (int d = 0; d < rbase()->vProps.ndevs; d++) {
        int n = 0;
        ASSERT_EQ(railnetIbPollDev(rbase(), d, &n), ncclSuccess);
      }
    ASSERT_NE(re->arrived[pos % RAILNET_IB_EAGER_SLOTS], 0u) << "the eager message did not arrive";
    void* data = rbuf.data();
    size_t posted = 64;
    int tag = 7;
    res = ib->irecv(rc, 1, &data, &posted, &tag, &rmh, nullptr, &r);
    EXPECT_EQ(r, nullptr);
  } else {
    int done = 0;
    while (res == ncclSuccess && !done && netNowNs() < dl) res = ib->test(r, &done, nullptr);
    EXPECT_EQ(done, 0);
  }
  EXPECT_EQ(res, ncclInvalidUsage);
  EXPECT_TRUE(LogCapture::contains("with tag 8 came at fifo position " + std::to_string(pos) + ", whose irecv has tag 7"))
      << LogCapture::all();
  for (int b = 0; b < 64; b++) ASSERT_EQ(rbuf[b], 0x5a) << "byte " << b << " of the irecv's buffer was written";
}

INSTANTIATE_TEST_SUITE_P(Order, IbEagerWrongTag, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "MessageFirst" : "IrecvFirst"; });

}  // namespace
