// The IB data path as a unit test: the real IB plugin (listen / connect / accept over
// loopback TCP, regMr, isend / irecv / iflush / test, close) over the in-process loopback
// fake of the verbs data calls (ib_fake_data.h), with injected faults. Four fake RoCE HCAs,
// fk0..fk3 (one port each); single-device comms go fk0 -> fk1, fused ones (fk0+fk2) ->
// (fk1+fk3), as the soft-RoCE failover test fuses rxe0+rxe2 and rxe1+rxe3. The wire moves
// only when a CQ is polled, so every test is one thread and waits for events, not time.
#include <endian.h>
#include <atomic>
#include <chrono>
#include <thread>
#include <mutex>
#include <condition_variable>
#include "ib_data_fixture.h"
#include "../../src/transport/net_ib/wrid.h"
extern "C" {
#include "../../src/transport/net_ib/comm.h"
#include "../../src/transport/net_ib/eager/eager_pool.h"
#include "../../src/transport/net_ib/regpool.h"
}

namespace {

// ---------------------------------------------------------------- plain p2p

struct P2pCase {
  const char* name;
  const char* eager;  // RAILNET_IB_EAGER_SIZE (nullptr: the default, on)
  const char* qps;    // NCCL_IB_QPS_PER_CONNECTION
  const char* split;  // NCCL_IB_SPLIT_DATA_ON_QPS
};
class IbP2p : public IbDataPath, public ::testing::WithParamInterface<P2pCase> {};

// Every size from 0 to just above 1 MiB (around the eager limit, the 128-byte chunk
// alignment of split messages and page sizes), posted one at a time and 8 in flight: the
// receiver gets every byte at its place, nothing beyond what was sent, and both ends report
// the size sent.
TEST_P(IbP2p, EverySizeEveryByte) {
  const P2pCase& c = GetParam();
  if (c.eager) env.set("RAILNET_IB_EAGER_SIZE", c.eager);
  env.set("NCCL_IB_QPS_PER_CONNECTION", c.qps);
  env.set("NCCL_IB_SPLIT_DATA_ON_QPS", c.split);
  LogCapture log;
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  const size_t sizes[] = {0, 1, 7, 127, 128, 129, 255, 256, 4095, 4096, 4097, 8191, 65536 + 3, (1 << 20) + 5};
  const int n = (int)(sizeof(sizes) / sizeof(sizes[0]));
  std::vector<char*> src(n), dst(n);
  std::vector<void*> smh(n), rmh(n);
  for (int i = 0; i < n; i++) {
    src[i] = buffer(sc, sizes[i], &smh[i]);
    dst[i] = buffer(rc, sizes[i], &rmh[i]);
    fill(src[i], sizes[i], i);
  }
  for (int round = 0; round < 2; round++) {  // one at a time, then all in flight
    std::vector<void*> rr(n), sr(n);
    std::vector<int> rdone(n), got(n, -1);
    for (int i = 0; i < n; i++) {
      memset(dst[i], kGuard, sizes[i] + 64);
      void* d = dst[i];
      size_t sz = sizes[i];
      int tag = 7;
      ASSERT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh[i], nullptr, &rr[i]), ncclSuccess);
      ASSERT_NE(rr[i], nullptr) << "irecv " << i;
      rdone[i] = 0;
      sr[i] = isendNow(src[i], sizes[i], 7, smh[i], rr[i], &rdone[i], &got[i]);
      ASSERT_NE(sr[i], nullptr) << "isend " << i << " of " << sizes[i] << " bytes\n" << LogCapture::all();
      if (round == 0 || i == n - 1) {
        for (int j = round == 0 ? i : 0; j <= i; j++) {
          int sent = -1;
          if (!rdone[j]) {
            ASSERT_EQ(wait(rr[j], &got[j]), "") << "receive of " << sizes[j] << " bytes\n" << LogCapture::all();
          }
          ASSERT_EQ(wait(sr[j], &sent), "") << "send of " << sizes[j] << " bytes\n" << LogCapture::all();
          EXPECT_EQ(got[j], (int)sizes[j]);
          EXPECT_EQ(sent, (int)sizes[j]);
          EXPECT_EQ(check(dst[j], sizes[j], j), "");
          for (size_t g = sizes[j]; g < sizes[j] + 64; g++)
            ASSERT_EQ(dst[j][g], kGuard) << "byte " << g << " past the " << sizes[j] << " sent was written";
        }
      }
    }
  }
  EXPECT_FALSE(LogCapture::contains("", NCCL_LOG_WARN)) << LogCapture::all();
}

INSTANTIATE_TEST_SUITE_P(Layouts, IbP2p,
                         ::testing::Values(P2pCase{"Eager", nullptr, "1", "0"}, P2pCase{"NoEager", "0", "1", "0"},
                                           P2pCase{"TwoQpsRoundRobin", "0", "2", "0"},
                                           P2pCase{"ThreeQpsSplit", "0", "3", "1"},
                                           P2pCase{"EagerTwoQpsSplit", nullptr, "2", "1"}),
                         [](const ::testing::TestParamInfo<P2pCase>& i) { return std::string(i.param.name); });

// A stream of 64 messages through the 8-slot window wraps the fifo many times.
TEST_F(IbDataPath, StreamWrapsTheFifo) {
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  ASSERT_EQ(stream(200, 3000 + 128 * 1024, 8, nullptr), "") << LogCapture::all();
  ASSERT_EQ(stream(300, 100, 8, nullptr), "") << LogCapture::all();
}

// ---------------------------------------------------------------- multi-receive

// One irecv of three buffers (tags 10, 11, 12), the isends in the reverse tag order: each
// buffer gets the message of its tag, every byte, and its own size.
TEST_F(IbDataPath, MultiRecvMatchesByTag) {
  LogCapture log;
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  const size_t sizes[3] = {5000, 1, 70000};
  char *src[3], *dst[3];
  void *smh[3], *rmh[3], *sr[3];
  void* data[3];
  size_t posted[3];
  int tags[3];
  for (int i = 0; i < 3; i++) {
    src[i] = buffer(sc, sizes[i], &smh[i]);
    dst[i] = buffer(rc, sizes[i] + 100, &rmh[i]);
    fill(src[i], sizes[i], 10 + i);
    data[i] = dst[i];
    posted[i] = sizes[i] + 100;  // more than is sent: the sizes say how much came
    tags[i] = 10 + i;
  }
  void* rr = nullptr;
  for (int round = 0; round < 2; round++) {  // the comm's first irecvs: two multi-receives in a row
    SCOPED_TRACE("multi-receive " + std::to_string(round));
    rr = nullptr;
    ASSERT_EQ(ib->irecv(rc, 3, data, posted, tags, rmh, nullptr, &rr), ncclSuccess);
    ASSERT_NE(rr, nullptr);
    int got[3] = {-1, -1, -1}, rdone = 0;
    for (int i = 2; i >= 0; i--) {
      sr[i] = isendNow(src[i], sizes[i], 10 + i, smh[i], rr, &rdone, got);
      ASSERT_NE(sr[i], nullptr) << LogCapture::all();
    }
    if (!rdone) {
      ASSERT_EQ(wait(rr, got), "") << LogCapture::all();
    }
    for (int i = 0; i < 3; i++) {
      int sent = -1;
      ASSERT_EQ(wait(sr[i], &sent), "");
      EXPECT_EQ(sent, (int)sizes[i]);
      EXPECT_EQ(got[i], (int)sizes[i]) << "buffer " << i;
      EXPECT_EQ(check(dst[i], sizes[i], 10 + i), "") << "buffer " << i;
      EXPECT_EQ(dst[i][sizes[i]], kGuard) << "buffer " << i;
    }
  }
  int got[3] = {-1, -1, -1};
  // and plain receives after it still work (a multi-receive ends eager messages: eager.h)
  void* d = dst[0];
  size_t sz = sizes[0];
  int tag = 3;
  fill(src[0], sizes[0], 99);
  ASSERT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh[0], nullptr, &rr), ncclSuccess);
  void* s = isendNow(src[0], sizes[0], 3, smh[0]);
  ASSERT_EQ(wait(rr, got), "");
  ASSERT_EQ(wait(s, nullptr), "");
  EXPECT_EQ(check(dst[0], sizes[0], 99), "");
  EXPECT_FALSE(LogCapture::contains("", NCCL_LOG_WARN)) << LogCapture::all();
}

// Multi-receives of eight tagged buffers from the comm's first irecv on, three in flight, each
// group's isends in reverse tag order (the soft-RoCE IbP2pTest.MultiReceiveOfEightTaggedBuffers
// plan): the comm never took a ring, but its first message may go into the first-message box,
// so its eager messages end with the close exchange, and every group completes.
TEST_F(IbDataPath, MultiReceivesBeforeAnyRingAllComplete) {
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  const int nb = NCCL_NET_IB_MAX_RECVS, groups = 6, window = 3;
  auto sizeOf = [](int i) { return (size_t)(i * 4099 + i); };
  std::vector<char*> src(groups * nb), dst(groups * nb);
  std::vector<void*> smh(groups * nb), rmh(groups * nb);
  for (int k = 0; k < groups * nb; k++) {
    src[k] = buffer(sc, sizeOf(k % nb) + 1, &smh[k]);
    dst[k] = buffer(rc, sizeOf(k % nb) + 64, &rmh[k]);
    fill(src[k], sizeOf(k % nb), k);
  }
  std::vector<void*> rr(groups, nullptr), sr(groups * nb, nullptr);
  std::vector<int> rdone(groups, 0), sdone(groups * nb, 0);
  int nextRecv = 0, nextSend = 0, recvsDone = 0, sendsDone = 0;
  long long deadline = netNowNs() + 10000000000LL;
  LogCapture cap;
  while ((recvsDone < groups || sendsDone < groups * nb) && netNowNs() < deadline) {
    if (nextRecv < groups && nextRecv - recvsDone < window) {
      void* data[nb];
      size_t posted[nb];
      int tags[nb];
      for (int i = 0; i < nb; i++) {
        data[i] = dst[nextRecv * nb + i];
        posted[i] = sizeOf(i) + 64;
        tags[i] = nextRecv * nb + i;
      }
      ASSERT_EQ(ib->irecv(rc, nb, data, posted, tags, &rmh[nextRecv * nb], nullptr, &rr[nextRecv]), ncclSuccess);
      if (rr[nextRecv]) nextRecv++;
    }
    if (nextSend < nextRecv * nb) {  // each group's buffers in reverse tag order
      int g = nextSend / nb, k = g * nb + (nb - 1 - nextSend % nb);
      ASSERT_EQ(ib->isend(sc, src[k], sizeOf(k % nb), k, smh[k], nullptr, &sr[k]), ncclSuccess);
      if (sr[k]) nextSend++;
    }
    for (int k = 0; k < groups * nb; k++) {
      if (sr[k] == nullptr || sdone[k]) continue;
      ASSERT_EQ(ib->test(sr[k], &sdone[k], nullptr), ncclSuccess) << LogCapture::all();
      sendsDone += sdone[k];
    }
    for (int g = 0; g < nextRecv; g++) {
      if (rdone[g]) continue;
      int got[nb];
      ASSERT_EQ(ib->test(rr[g], &rdone[g], got), ncclSuccess) << LogCapture::all();
      if (!rdone[g]) continue;
      recvsDone++;
      for (int i = 0; i < nb; i++) {
        EXPECT_EQ(got[i], (int)sizeOf(i)) << "group " << g << " buffer " << i;
        EXPECT_EQ(check(dst[g * nb + i], sizeOf(i), g * nb + i), "") << "group " << g << " buffer " << i;
      }
    }
  }
  EXPECT_EQ(recvsDone, groups) << LogCapture::all();
  EXPECT_EQ(sendsDone, groups * nb);
  EXPECT_TRUE(LogCapture::contains("asking the sender to end its eager messages")) << LogCapture::all();
  EXPECT_FALSE(LogCapture::contains("", NCCL_LOG_WARN)) << LogCapture::all();
}

// The send queue holds 32 WRs (NCCL_NET_MAX_REQUESTS) and a multi-receive of 8 takes 9 (a
// write per buffer, the sizes record with the immediate): with the sender's QP stalled, isend
// must stop posting when the next slot would not fit, also after many slots' completions
// gave their credits back (the fake fails a post beyond max_send_wr with ENOMEM); released,
// every byte arrives.
TEST_F(IbDataPath, SendQueueCreditsHoldAtTheQueueDepth) {
  env.set("RAILNET_IB_EAGER_SIZE", "0");  // (the first multi-receive would end them: see MultiRecv)
  LogCapture log;
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  const int nb = 8, slots = 12;
  const size_t size = 200;
  void *smh, *rmh;
  char* src = buffer(sc, nb * slots * size, &smh);
  char* dst = buffer(rc, nb * slots * size, &rmh);
  auto round = [&](int base, bool stalled) {
    std::vector<void*> rr(slots), sr(nb * slots);
    for (int k = 0; k < nb * slots; k++) fill(src + k * size, size, base + k);
    memset(dst, kGuard, nb * slots * size);
    if (stalled) N->stall = [](const FakeQp& q) { return q.hca->name == "fk0"; };
    for (int m = 0; m < slots; m++) {
      void* data[nb];
      size_t sizes[nb];
      int tags[nb];
      void* mhs[nb];
      for (int b = 0; b < nb; b++) {
        data[b] = dst + (m * nb + b) * size;
        sizes[b] = size;
        tags[b] = b;
        mhs[b] = rmh;
      }
      ASSERT_EQ(ib->irecv(rc, nb, data, sizes, tags, mhs, nullptr, &rr[m]), ncclSuccess);
      ASSERT_NE(rr[m], nullptr);
    }
    // every isend is offered until taken; stalled, the slots that do not fit wait
    int posted = 0;
    for (int pass = 0; pass < 3 && posted < nb * slots; pass++)
      for (int k = posted; k < nb * slots; k++) {
        ASSERT_EQ(ib->isend(sc, src + k * size, size, k % nb, smh, nullptr, &sr[k]), ncclSuccess)
            << "isend " << k << "\n" << LogCapture::all();
        if (sr[k] == nullptr) break;
        posted = k + 1;
      }
    if (stalled) {
      EXPECT_LT(posted, nb * slots) << "every slot posted on a stalled QP of 32 WRs";
      for (auto& q : N->qps)
        if (!q.destroyed && q.hca->name == "fk0") {
          EXPECT_LE(q.sq.size(), q.cap.max_send_wr);
        }
      N->stall = nullptr;
    }
    long long deadline = netNowNs() + 10000000000LL;
    while (posted < nb * slots && netNowNs() < deadline) {
      ASSERT_EQ(ib->isend(sc, src + posted * size, size, posted % nb, smh, nullptr, &sr[posted]), ncclSuccess);
      if (sr[posted]) posted++;
      else if (posted >= nb) {
        int done = 0;  // completions give the send queue back
        ASSERT_EQ(ib->test(sr[posted - nb], &done, nullptr), ncclSuccess);
        if (done) sr[posted - nb] = nullptr;
      }
    }
    ASSERT_EQ(posted, nb * slots);
    for (int m = 0; m < slots; m++) {
      int got[nb];
      ASSERT_EQ(wait(rr[m], got), "") << LogCapture::all();
      for (int b = 0; b < nb; b++) EXPECT_EQ(got[b], (int)size);
    }
    for (int k = 0; k < nb * slots; k++) {
      if (sr[k]) {
        ASSERT_EQ(wait(sr[k], nullptr), "");
      }
      ASSERT_EQ(check(dst + k * size, size, base + k), "");
    }
  };
  for (int r = 0; r < 3; r++) round(r * 1000, false);  // 36 slots' credits given back
  round(5000, true);
  EXPECT_FALSE(LogCapture::contains("", NCCL_LOG_WARN)) << LogCapture::all();
}

// ---------------------------------------------------------------- eager

// With eager messages (the default), a small isend goes before its irecv is posted and its
// request is done without the receiver: the bytes wait in the receiver's ring until the
// irecv takes them. Without (RAILNET_IB_EAGER_SIZE=0) the isend has to wait for the irecv.
TEST_F(IbDataPath, EagerSendGoesBeforeTheReceive) {
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  void *smh, *rmh;
  const size_t n = 1000;
  char* src = buffer(sc, n, &smh);
  char* dst = buffer(rc, n, &rmh);
  // the receiver's first small irecvs go through a clear-to-send (eager.h): warm up
  for (int k = 0; k < 40; k++) {
    fill(src, n, k);
    void* d = dst;
    size_t sz = n;
    int tag = 0;
    void* rr = nullptr;
    ASSERT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh, nullptr, &rr), ncclSuccess);
    void* sr = isendNow(src, n, 0, smh);
    ASSERT_EQ(wait(sr, nullptr), "");
    ASSERT_EQ(wait(rr, nullptr), "");
    ASSERT_EQ(check(dst, n, k), "");
  }
  fill(src, n, 77);
  void* sr = nullptr;
  ASSERT_EQ(ib->isend(sc, src, n, 0, smh, nullptr, &sr), ncclSuccess);
  ASSERT_NE(sr, nullptr) << "an eager isend takes no clear-to-send";
  ASSERT_EQ(wait(sr, nullptr), "");
  memset(src, 0, n);  // the send is done: its buffer is the caller's again
  memset(dst, kGuard, n + 64);
  void* d = dst;
  size_t sz = n + 64;
  int tag = 0, got = -1;
  void* rr = nullptr;
  ASSERT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh, nullptr, &rr), ncclSuccess);
  ASSERT_EQ(wait(rr, &got), "") << LogCapture::all();
  EXPECT_EQ(got, (int)n);
  EXPECT_EQ(check(dst, n, 77), "");
  EXPECT_EQ(dst[n], kGuard);
}


// A chunk of the registered pool (regpool.h) is mapped and registered outside the pool's lock:
// while one thread's registration is stuck in ibv_reg_mr, another thread takes a block (of a
// size that needs a chunk of its own, so it registers too) without waiting for it. Before, that
// take waited on the lock for as long as the other registration took.
TEST_F(IbDataPath, ARegistrationDoesNotHoldThePoolForOthers) {
  static struct railnetIbRegPool pool = RAILNET_IB_REGPOOL_INIT("test blocks", "none", 8);
  struct railnetIbRegDevs devs;
  devs.ndevs = 1;
  devs.ibDevN[0] = ncclIbMergedDevs[dev0].vProps.devs[0];
  std::mutex m;
  std::condition_variable cv;
  bool entered = false, release = false;
  std::atomic<int> calls{0};
  N->regMrHook = [&] {
    if (calls++ != 0) return;
    std::unique_lock<std::mutex> l(m);
    entered = true;
    cv.notify_all();
    cv.wait(l, [&] { return release; });
  };
  struct railnetIbRegBuf a, b;
  int gotA = 0, gotB = 0;
  ncclResult_t ra = ncclInternalError, rb = ncclInternalError;
  std::thread t([&] { ra = railnetIbRegPoolTake(&pool, &devs, 4096, IBV_ACCESS_LOCAL_WRITE, 0, &a, &gotA); });
  bool inRegistration;
  {
    std::unique_lock<std::mutex> l(m);
    inRegistration = cv.wait_for(l, std::chrono::seconds(10), [&] { return entered; });
  }
  bool tookMeanwhile = false;
  std::thread u;
  std::atomic<bool> bDone{false};
  if (inRegistration) {
    u = std::thread([&] {
      rb = railnetIbRegPoolTake(&pool, &devs, 8192, IBV_ACCESS_LOCAL_WRITE, 0, &b, &gotB);
      bDone = true;
      std::lock_guard<std::mutex> l(m);
      cv.notify_all();
    });
    std::unique_lock<std::mutex> l(m);
    tookMeanwhile = cv.wait_for(l, std::chrono::seconds(10), [&] { return bDone.load(); });
  }
  {
    std::lock_guard<std::mutex> l(m);
    release = true;
  }
  cv.notify_all();
  t.join();
  if (u.joinable()) u.join();
  N->regMrHook = nullptr;
  EXPECT_TRUE(inRegistration) << "the first take never reached ibv_reg_mr";
  EXPECT_TRUE(tookMeanwhile) << "a take waited for another thread's registration";
  EXPECT_EQ(ra, ncclSuccess);
  EXPECT_EQ(rb, ncclSuccess);
  EXPECT_EQ(gotA, 1);
  EXPECT_EQ(gotB, 1);
  railnetIbRegPoolGive(&pool, &a);
  railnetIbRegPoolGive(&pool, &b);
  uint64_t inUse = 1, chunks = 1;
  railnetIbRegPoolCount(&pool, &inUse, &chunks);
  EXPECT_EQ(inUse, 0u);
  EXPECT_EQ(chunks, 0u);
}

// A comm's local control block (the sender's sizes to write, the receiver's clear-to-send
// entries) comes from the registered pool (regpool.h): 8 comm pairs register one local-only
// chunk per side, not 16 regions, beside the 16 regions their peers write (one per comm); all of
// it goes back at close, and a comm set up after that moves messages.
TEST_F(IbDataPath, EightCommsShareOneLocalControlRegistration) {
  env.set("NCCL_GDR_FLUSH_DISABLE", "1");  // no flush region (local-only, one per receive comm)
  auto live = [&](bool localOnly) {
    int n = 0;
    for (auto& m : N->mrs) n += m.live && (!localOnly || m.access == IBV_ACCESS_LOCAL_WRITE);
    return n;
  };
  int local0 = live(true), all0 = live(false);
  const int n = 8;
  std::vector<void*> s(n), r(n), l(n);
  for (int i = 0; i < n; i++) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    ASSERT_EQ(ib->listen(ctx, dev1, handle, &l[i]), ncclSuccess);
    ASSERT_TRUE(netConnectPair(ib, ctx, dev0, handle, l[i], &s[i], &r[i], 20000)) << LogCapture::all();
  }
  EXPECT_EQ(live(true) - local0, 2) << "local-only registrations for " << n << " comm pairs";
  EXPECT_EQ(live(false) - all0, 2 + 2 * n);
  for (int i = 0; i < n; i++) {
    EXPECT_EQ(ib->closeSend(s[i]), ncclSuccess);
    EXPECT_EQ(ib->closeRecv(r[i]), ncclSuccess);
    EXPECT_EQ(ib->closeListen(l[i]), ncclSuccess);
  }
  EXPECT_EQ(live(true), local0);
  EXPECT_EQ(live(false), all0);
  connect(dev0, dev1);
  EXPECT_EQ(stream(8, 70000, 2, nullptr), "");
}

// The eager buffers come from the process's pool (eager/eager_pool.h) only when a comm's
// first small message came: a stream of large messages takes none, on either side. The first
// small message goes eagerly into the receiver's first-message box, before its irecv, and the
// receiver's next irecv takes its ring (not the first message's delivery: that test() does no
// registration); the next ones go eagerly into the ring and take the sender's bounce slots.
// Closing gives both back.
TEST_F(IbDataPath, EagerBuffersComeFromThePoolAtTheFirstSmallMessage) {
  struct railnetIbEagerPoolStats st0, st;
  railnetIbEagerPoolGetStats(&st0);
  LogCapture cap;
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  ASSERT_EQ(stream(40, 65536, 4, nullptr), "");
  railnetIbEagerPoolGetStats(&st);
  EXPECT_EQ(st.inUse, st0.inUse) << "large messages only, yet eager buffers were taken";
  EXPECT_EQ(st.chunks, st0.chunks) << "large messages only, yet eager memory was registered";
  void *smh, *rmh;
  char* src = buffer(sc, 100, &smh);
  char* dst = buffer(rc, 100, &rmh);
  fill(src, 100, 50);
  void* sr = nullptr;
  ASSERT_EQ(ib->isend(sc, src, 100, 0, smh, nullptr, &sr), ncclSuccess);
  ASSERT_NE(sr, nullptr) << "the first small message waited for its irecv" << LogCapture::all();
  EXPECT_EQ(((struct ncclIbRequest*)sr)->type, NCCL_NET_IB_REQ_EAGER);
  ASSERT_EQ(wait(sr, nullptr), "");
  memset(src, 0, 100);  // done: the bytes went (the first-message box keeps a copy of its own)
  railnetIbEagerPoolGetStats(&st);
  EXPECT_EQ(st.inUse, st0.inUse) << "the first message took eager buffers before it was delivered";
  for (int k = 0; k < 3; k++) {
    void* d = dst;
    size_t sz = 100;
    int tag = 0;
    void* rr = nullptr;
    ASSERT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh, nullptr, &rr), ncclSuccess);
    if (k > 0) {
      fill(src, 100, k);
      int rdone = 0;
      sr = isendNow(src, 100, 0, smh, rr, &rdone);
      ASSERT_NE(sr, nullptr);
      EXPECT_EQ(((struct ncclIbRequest*)sr)->type, NCCL_NET_IB_REQ_EAGER) << "message " << k;
      ASSERT_EQ(wait(sr, nullptr), "");
      if (!rdone) {
        ASSERT_EQ(wait(rr, nullptr), "") << LogCapture::all();
      }
    } else {
      ASSERT_EQ(wait(rr, nullptr), "") << LogCapture::all();
    }
    ASSERT_EQ(check(dst, 100, k ? k : 50), "") << "message " << k;
    railnetIbEagerPoolGetStats(&st);
    EXPECT_EQ(st.inUse, st0.inUse + (k == 0 ? 0 : 2)) << "after message " << k << ": none, then the ring and bounce slots";
  }
  closeAll();
  railnetIbEagerPoolGetStats(&st);
  EXPECT_EQ(st.inUse, st0.inUse) << "closed comms kept eager buffers";
  EXPECT_EQ(st.chunks, st0.chunks) << "a chunk with all its buffers back was kept";
}

// The first-message box holds one message of at most 248 bytes (wire.h): a larger first
// message waits for its irecv's clear-to-send. A first message in the box that a multi-receive
// finds (the comm still has no ring) fills the buffer of its tag; the close exchange gives the
// other buffer its clear-to-send, and its message comes that way.
TEST_F(IbDataPath, TheFirstMessageBoxAndAMultiReceiveBeforeTheRing) {
  LogCapture cap;
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  const size_t boxMax = RAILNET_IB_EAGER_FIRST_BYTES - sizeof(struct railnetIbEagerHdr);
  void *smh[2], *rmh[2];
  char* src[2] = {buffer(sc, 5000, &smh[0]), buffer(sc, 5000, &smh[1])};
  char* dst[2] = {buffer(rc, 5000, &rmh[0]), buffer(rc, 5000, &rmh[1])};
  void* sr = nullptr;
  ASSERT_EQ(ib->isend(sc, src[0], boxMax + 1, 5, smh[0], nullptr, &sr), ncclSuccess);
  EXPECT_EQ(sr, nullptr) << "a first message larger than the box went before its irecv";
  fill(src[0], boxMax, 5);
  ASSERT_EQ(ib->isend(sc, src[0], boxMax, 5, smh[0], nullptr, &sr), ncclSuccess);
  ASSERT_NE(sr, nullptr) << "a first message that fits the box waited for its irecv";
  ASSERT_EQ(wait(sr, nullptr), "");
  void* sr2 = nullptr;
  fill(src[1], 100, 6);
  ASSERT_EQ(ib->isend(sc, src[1], 100, 6, smh[1], nullptr, &sr2), ncclSuccess);
  EXPECT_EQ(sr2, nullptr) << "a second small message went before the ring: the box takes one";
  void* data[2] = {dst[0], dst[1]};
  size_t posted[2] = {5000, 5000};
  int tags[2] = {5, 6}, got[2] = {-1, -1};
  void* rr = nullptr;
  ASSERT_EQ(ib->irecv(rc, 2, data, posted, tags, rmh, nullptr, &rr), ncclSuccess);
  ASSERT_NE(rr, nullptr);
  int rdone = 0;
  sr2 = isendNow(src[1], 100, 6, smh[1], rr, &rdone, got);
  ASSERT_NE(sr2, nullptr) << LogCapture::all();
  ASSERT_EQ(wait(sr2, nullptr), "");
  if (!rdone) {
    ASSERT_EQ(wait(rr, got), "") << LogCapture::all();
  }
  EXPECT_EQ(got[0], (int)boxMax);
  EXPECT_EQ(got[1], 100);
  EXPECT_EQ(check(dst[0], boxMax, 5), "");
  EXPECT_EQ(check(dst[1], 100, 6), "");
  EXPECT_TRUE(LogCapture::contains("asking the sender to end its eager messages")) << LogCapture::all();
  EXPECT_FALSE(LogCapture::contains("", NCCL_LOG_WARN)) << LogCapture::all();
}

// At the pool's bound (RAILNET_IB_EAGER_POOL=1; both ends on one device, so one pool) the
// receiver takes the one buffer and the sender finds none: its small messages keep the
// clear-to-send protocol (asking with a request-to-send where no entry comes), every byte
// arrives, no error; the INFO names the setting, the refusal is counted.
TEST_F(IbDataPath, APoolAtItsBoundKeepsTheClearToSendPath) {
  env.set("RAILNET_IB_EAGER_POOL", "1");
  railnetParamReset();
  struct railnetIbEagerPoolStats st0, st;
  railnetIbEagerPoolGetStats(&st0);
  LogCapture cap;
  connect(dev0, dev0);
  ASSERT_NE(sc, nullptr);
  ASSERT_EQ(stream(60, 100, 4, nullptr), "") << LogCapture::all();
  railnetIbEagerPoolGetStats(&st);
  EXPECT_EQ(st.inUse, st0.inUse + 1);
  EXPECT_GT(st.refused, st0.refused);
  EXPECT_TRUE(LogCapture::contains("the eager pool is at its bound (RAILNET_IB_EAGER_POOL=1")) << LogCapture::all();
  EXPECT_FALSE(LogCapture::contains("", NCCL_LOG_WARN)) << LogCapture::all();
  closeAll();
  env.set("RAILNET_IB_EAGER_POOL", nullptr);
  railnetParamReset();
}

TEST_F(IbDataPath, WithoutEagerTheSendWaitsForTheReceive) {
  env.set("RAILNET_IB_EAGER_SIZE", "0");
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  void *smh, *rmh;
  char* src = buffer(sc, 1000, &smh);
  char* dst = buffer(rc, 1000, &rmh);
  fill(src, 1000, 5);
  void* sr = nullptr;
  for (int i = 0; i < 100; i++) {
    ASSERT_EQ(ib->isend(sc, src, 1000, 0, smh, nullptr, &sr), ncclSuccess);
    ASSERT_EQ(sr, nullptr) << "no clear-to-send yet: isend must wait";
  }
  void* d = dst;
  size_t sz = 1000;
  int tag = 0;
  void* rr = nullptr;
  ASSERT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh, nullptr, &rr), ncclSuccess);
  sr = isendNow(src, 1000, 0, smh);
  ASSERT_EQ(wait(rr, nullptr), "");
  ASSERT_EQ(wait(sr, nullptr), "");
  EXPECT_EQ(check(dst, 1000, 5), "");
}

// ---------------------------------------------------------------- iflush

// With a GPUDirect peer memory module (the suite's sysfs) a receive is flushed by an RDMA
// read of its buffer through a QP connected to itself; the flush is done only when that
// read completed. With NCCL_GDR_FLUSH_DISABLE=1 there is nothing to flush.
TEST_F(IbDataPath, IflushReadsTheBufferAndWaitsForIt) {
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  void *smh, *rmh;
  char* src = buffer(sc, 70000, &smh);
  char* dst = buffer(rc, 70000, &rmh);
  fill(src, 70000, 3);
  void* d = dst;
  size_t sz = 70000;
  int tag = 0, got = 0;
  void* rr = nullptr;
  ASSERT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh, nullptr, &rr), ncclSuccess);
  void* sr = isendNow(src, 70000, 0, smh);
  ASSERT_EQ(wait(rr, &got), "");
  ASSERT_EQ(wait(sr, nullptr), "");
  size_t readsBefore = 0;
  for (auto* q : qpsOn("fk1")) readsBefore += q->reads;
  void* fr = nullptr;
  N->hold = true;  // the read does not happen yet: the flush is not done
  ASSERT_EQ(ib->iflush(rc, 1, &d, &got, &rmh, &fr), ncclSuccess);
  ASSERT_NE(fr, nullptr) << "a receive with GPUDirect is flushed";
  int done = 1;
  ASSERT_EQ(ib->test(fr, &done, nullptr), ncclSuccess);
  EXPECT_EQ(done, 0) << "flush done before its read completed";
  N->hold = false;
  ASSERT_EQ(wait(fr, nullptr), "") << LogCapture::all();
  size_t reads = 0;
  for (auto* q : qpsOn("fk1")) reads += q->reads;
  EXPECT_EQ(reads, readsBefore + 1) << "one RDMA read on the receiver's device";
  // a flush of nothing received is no request
  int zero = 0;
  fr = nullptr;
  ASSERT_EQ(ib->iflush(rc, 1, &d, &zero, &rmh, &fr), ncclSuccess);
  EXPECT_EQ(fr, nullptr);
}

TEST_F(IbDataPath, NoFlushWhenDisabled) {
  env.set("NCCL_GDR_FLUSH_DISABLE", "1");
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  void* rmh;
  char* dst = buffer(rc, 100, &rmh);
  void* d = dst;
  int got = 100;
  void* fr = nullptr;
  ASSERT_EQ(ib->iflush(rc, 1, &d, &got, &rmh, &fr), ncclSuccess);
  EXPECT_EQ(fr, nullptr);
}

// ---------------------------------------------------------------- errors

// One data write completes with an error: the sender's request fails with ncclRemoteError
// after a WARN that names the status, the QP and the hint; the comm stays failed.
TEST_F(IbDataPath, ErrorCompletionFailsTheRequestWithAWarn) {
  env.set("RAILNET_IB_EAGER_SIZE", "0");
  LogCapture log;
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  void *smh, *rmh;
  char* src = buffer(sc, 5000, &smh);
  char* dst = buffer(rc, 5000, &rmh);
  // the sender's write with immediate (the data's last write) fails
  N->failSend([](const FakeQp& q, const struct ibv_send_wr& w) { return q.hca->name == "fk0" && w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM; },
              IBV_WC_REM_ACCESS_ERR);
  void* d = dst;
  size_t sz = 5000;
  int tag = 0;
  void* rr = nullptr;
  ASSERT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh, nullptr, &rr), ncclSuccess);
  void* sr = isendNow(src, 5000, 0, smh);
  ASSERT_NE(sr, nullptr);
  ncclResult_t res = ncclSuccess;
  EXPECT_NE(wait(sr, nullptr, &res), "");
  EXPECT_EQ(res, ncclRemoteError);
  EXPECT_TRUE(LogCapture::contains("status=remote access error(10)", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("HINT: the peer refused the RDMA access", NCCL_LOG_WARN)) << LogCapture::all();
  // the receiver's QP failed with it (the responder saw the bad access): its receive fails too
  res = ncclSuccess;
  EXPECT_NE(wait(rr, nullptr, &res), "");
  EXPECT_EQ(res, ncclRemoteError);
  EXPECT_TRUE(LogCapture::contains("status=Work Request Flushed Error(5)", NCCL_LOG_WARN)) << LogCapture::all();
  void* again = nullptr;
  EXPECT_EQ(ib->isend(sc, src, 10, 0, smh, nullptr, &again), ncclRemoteError);
  EXPECT_EQ(again, nullptr);
}

// Every packet of the path lost (a single-device comm, no failover): the write ends in
// IBV_WC_RETRY_EXC_ERR and the request fails, with the retry hint.
TEST_F(IbDataPath, DroppedPacketsEndInRetryExceeded) {
  env.set("RAILNET_IB_EAGER_SIZE", "0");
  LogCapture log;
  void* smh = nullptr;
  char* src = nullptr;
  void* rr = connectWithOneReceive(5000, &src, &smh);
  ASSERT_NE(rr, nullptr);
  N->drop(&W->hcas[1], 1);  // after the clear-to-send landed
  void* sr = isendNow(src, 5000, 0, smh);
  ASSERT_NE(sr, nullptr);
  ncclResult_t res = ncclSuccess;
  EXPECT_NE(wait(sr, nullptr, &res), "");
  EXPECT_EQ(res, ncclRemoteError);
  EXPECT_TRUE(LogCapture::contains("status=transport retry counter exceeded(12)", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("HINT: the peer did not acknowledge", NCCL_LOG_WARN)) << LogCapture::all();
}

// The receiver's port goes DOWN (an IBV_EVENT_PORT_ERR, its state DOWN) while its receive
// waits and nothing is in flight, failover off (NCCL's default): the receive fails at once,
// not after the QPs' retry time (34 s at NCCL's defaults), with a WARN naming the port, the
// cause and the fix; the sender's comm fails when it sees the receiver close its side.
TEST_F(IbDataPath, PortDownWithoutFailoverFailsTheWaitingReceiveAtOnce) {
  LogCapture log;
  void* smh = nullptr;
  char* src = nullptr;
  void* rr = connectWithOneReceive(5000, &src, &smh);
  ASSERT_NE(rr, nullptr);
  int done = 0;
  ASSERT_EQ(ib->test(rr, &done, nullptr), ncclSuccess);
  ASSERT_EQ(done, 0);
  int acks = eventsAcked();
  N->portDown(&W->hcas[1], 1);
  long long deadline = netNowNs() + 10000000000LL;
  while (eventsAcked() == acks && netNowNs() < deadline) std::this_thread::yield();
  ASSERT_GT(eventsAcked(), acks) << "the async event thread did not read the event";
  // the next call that looks at the device sees the event: a few calls, not a retry time
  ncclResult_t res = ncclSuccess;
  int calls = 0;
  while (res == ncclSuccess && !done && calls < 1000 && netNowNs() < deadline) {
    res = ib->test(rr, &done, nullptr);
    calls++;
  }
  EXPECT_EQ(res, ncclRemoteError) << "after " << calls << " test() calls\n" << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("fk1:1 of the receive comm with", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("its port is DOWN now (its link went down); the comm fails", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("NCCL_IB_RESILIENCY_PORT_FAILOVER=1", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_FALSE(LogCapture::contains("unless it is ACTIVE again", NCCL_LOG_WARN)) << LogCapture::all();
  // the sender learns it from the receiver's closed socket: an isend, or the test of one, fails
  void* sr = nullptr;
  ncclResult_t sres = ncclSuccess;
  deadline = netNowNs() + 10000000000LL;
  while (sres == ncclSuccess && netNowNs() < deadline) {
    int sdone = 0;
    if (sr == nullptr) sres = ib->isend(sc, src, 5000, 0, smh, nullptr, &sr);
    else if ((sres = ib->test(sr, &sdone, nullptr)) == ncclSuccess && sdone) sr = nullptr;
  }
  EXPECT_NE(sres, ncclSuccess) << "the sender did not notice the receiver's failed comm\n" << LogCapture::all();
}

// ibv_post_send fails (ENOMEM): isend fails with ncclSystemError after ibvwrap's WARN.
TEST_F(IbDataPath, PostSendFailureFailsTheIsend) {
  env.set("RAILNET_IB_EAGER_SIZE", "0");
  LogCapture log;
  void* smh = nullptr;
  char* src = nullptr;
  void* rr = connectWithOneReceive(5000, &src, &smh);
  ASSERT_NE(rr, nullptr);
  N->failPostSend([](const FakeQp& q, const struct ibv_send_wr&) { return q.hca->name == "fk0"; }, ENOMEM);
  ncclResult_t res = ncclSuccess;
  void* sr = nullptr;
  for (int i = 0; i < 1000 && res == ncclSuccess && sr == nullptr; i++) res = ib->isend(sc, src, 5000, 0, smh, nullptr, &sr);
  EXPECT_EQ(res, ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("ibv_post_send() failed with error Cannot allocate memory", NCCL_LOG_WARN))
      << LogCapture::all();
}

// ---------------------------------------------------------------- port failover

class IbFailover : public IbDataPath {
 protected:
  // The sender's INFO at the end of a failover says it replayed one chunk or more.
  static bool replayedSome() {
    for (auto& l : LogCapture::lines()) {
      size_t at = l.msg.find(" chunk(s) replayed");
      if (at == std::string::npos || l.msg.find("done: ") == std::string::npos) continue;
      size_t from = l.msg.find("done: ") + 6;
      if (atoi(l.msg.c_str() + from) > 0) return true;
    }
    return false;
  }
  void SetUp() override {
    IbDataPath::SetUp();
    env.set("NCCL_IB_RESILIENCY_PORT_FAILOVER", "1");
    env.set("RAILNET_IB_PATH_PROBE_INTERVAL", "0");  // the data QPs' completions tell
    env.set("NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY", "0");
  }
  // count messages of msg bytes (48 of 64 KiB + 3 unless said) over the fused pair, 4 in
  // flight (message k on QP k % 2: odd ones on fk2); fault(k) before messages at, at + 1
  // and at + 2.
  void run(const std::function<void(int)>& fault, bool expectFailover, const char* warned = "port failover: fk",
           int count = 48, size_t msg = 65536 + 3, int at = 12) {
    LogCapture log;
    connect(fused0, fused1);
    ASSERT_NE(sc, nullptr);
    auto second = qpsOn("fk2"), first = qpsOn("fk0");
    ASSERT_FALSE(second.empty());
    ASSERT_FALSE(first.empty());
    size_t firstBefore = 0;
    std::string err = stream(count, msg, 4, [&](int k) {
      if (k == at) firstBefore = bytesOn(first);
      if (k >= at && k <= at + 2) fault(k);
    });
    if (!expectFailover) {
      EXPECT_NE(err, "") << "without failover the comm fails";
      EXPECT_TRUE(LogCapture::contains("status=transport retry counter exceeded", NCCL_LOG_WARN)) << LogCapture::all();
      return;
    }
    ASSERT_EQ(err, "") << LogCapture::all();
    EXPECT_TRUE(LogCapture::contains(warned, NCCL_LOG_WARN)) << LogCapture::all();
    for (auto* q : second) EXPECT_EQ(q->state, IBV_QPS_ERR) << "fk2's QP " << q->qp.qp_num;
    // the messages after the fault went over fk0 (and what was replayed)
    EXPECT_GE(bytesOn(first) - firstBefore, (size_t)(count - at) * msg) << "traffic after the fault on fk0";
  }
};

// fk2's path drops every packet from message 12 on: its QP's writes end in
// IBV_WC_RETRY_EXC_ERR, the comm fails over to fk0 and every byte of every message arrives.
TEST_F(IbFailover, DroppedPathFailsOverEveryByteArrives) {
  run([&](int k) {
    if (k == 12) N->drop(&W->hcas[2], 1);
  }, true);
}

// The wire stops when message 13's data write is posted on fk2, and fk2's path drops every
// packet before message 14: that write is lost in flight, and the sender replays its chunk
// on fk0 (the receiver's completion records or its answer say it did not arrive).
TEST_F(IbFailover, WritesLostInFlightAreReplayed) {
  run([&](int k) {
    if (k == 12)
      N->holdAtPost([](const FakeQp& q, const struct ibv_send_wr& w) {
        return q.hca->name == "fk2" && w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
      });
    if (k == 14) {
      EXPECT_TRUE(N->hold) << "message 13's write was not posted before message 14's receive";
      EXPECT_GT(N->pendingSends(), 0) << "writes in flight when the path goes";
      N->drop(&W->hcas[2], 1);
      N->hold = false;
    }
  }, true);
  EXPECT_TRUE(replayedSome()) << LogCapture::all();
}

// fk3 (the receiver's second device) goes DOWN with an async event: the same.
TEST_F(IbFailover, PortDownEventFailsOver) {
  run([&](int k) {
    if (k != 12) return;
    int acks = eventsAcked();
    N->portDown(&W->hcas[3], 1);
    // the transport's event thread has taken the event in (it acks after counting it)
    long long deadline = netNowNs() + 10000000000LL;
    while (eventsAcked() == acks && netNowNs() < deadline) std::this_thread::yield();
    ASSERT_GT(eventsAcked(), acks) << "the async event thread did not read the event";
  }, true, "port failover: fk3:1 lost its path");
  EXPECT_TRUE(LogCapture::contains("fk3:1 Got non-fatal async event", NCCL_LOG_WARN)) << LogCapture::all();
}

// Error completions on fk2's QP (a local QP operation error), no packet lost otherwise.
TEST_F(IbFailover, ErrorCompletionFailsOver) {
  run([&](int k) {
    if (k == 12)
      N->failSend([](const FakeQp& q, const struct ibv_send_wr&) { return q.hca->name == "fk2"; }, IBV_WC_LOC_QP_OP_ERR);
  }, true, "port failover: fk2:1 lost its path");
  EXPECT_TRUE(LogCapture::contains("status=local QP operation error(2)", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(replayedSome()) << "the data write that failed is written again\n" << LogCapture::all();
}

// Small messages, which go eagerly once the receiver's first ones went through a
// clear-to-send: fk2's path drops every packet from message 100 on, with eager writes on it;
// the comm fails over and every byte of every message arrives, eager writes going on over
// fk0 afterwards.
TEST_F(IbFailover, EagerMessagesFailOverEveryByteArrives) {
  std::atomic<int> before{0}, onFk2{0}, after{0};
  std::atomic<bool> faulted{false};
  N->holdAtPost([&](const FakeQp& q, const struct ibv_send_wr& w) {  // counts, never holds
    if (w.opcode != IBV_WR_RDMA_WRITE_WITH_IMM || !(be32toh(w.imm_data) & RAILNET_IB_EAGER_IMM)) return false;
    (faulted ? after : before)++;
    if (!faulted && q.hca->name == "fk2") onFk2++;
    return false;
  });
  run([&](int k) {
    if (k != 100) return;
    ASSERT_GT(before.load(), 0) << "no eager write before the fault";
    ASSERT_GT(onFk2.load(), 0) << "no eager write on the path that goes";
    faulted = true;
    N->drop(&W->hcas[2], 1);
  }, true, "port failover: fk", 160, 1000, 100);
  EXPECT_GT(after.load(), 0) << "no eager write after the failover";
}

// The comm's first small message goes into the receiver's first-message box on fk2 (position
// 1: QP 1), whose path drops every packet: the write is lost, the comm fails over and the
// sender writes it again, from its own copy, over fk0; the irecv posted after it gets every byte.
TEST_F(IbFailover, TheFirstMessageLostWithAPortIsWrittenAgain) {
  LogCapture log;
  connect(fused0, fused1);
  ASSERT_NE(sc, nullptr);
  ASSERT_EQ(stream(1, 65536 + 3, 1, nullptr), "");  // position 0, through its clear-to-send
  void *smh, *rmh;
  char* src = buffer(sc, 200, &smh);
  char* dst = buffer(rc, 200, &rmh);
  fill(src, 200, 9);
  N->drop(&W->hcas[2], 1);
  void* sr = nullptr;
  ASSERT_EQ(ib->isend(sc, src, 200, 0, smh, nullptr, &sr), ncclSuccess);
  ASSERT_NE(sr, nullptr) << "the first small message waited for its irecv";
  void* d = dst;
  size_t sz = 200;
  int tag = 0, sdone = 0, rdone = 0, got = -1;
  void* rr = nullptr;
  ASSERT_EQ(ib->irecv(rc, 1, &d, &sz, &tag, &rmh, nullptr, &rr), ncclSuccess);
  long long deadline = netNowNs() + 20000000000LL;
  while ((!sdone || !rdone) && netNowNs() < deadline) {
    if (!sdone) {
      ASSERT_EQ(ib->test(sr, &sdone, nullptr), ncclSuccess) << LogCapture::all();
    }
    if (!rdone) {
      ASSERT_EQ(ib->test(rr, &rdone, &got), ncclSuccess) << LogCapture::all();
    }
  }
  ASSERT_TRUE(sdone && rdone) << LogCapture::all();
  EXPECT_EQ(got, 200);
  EXPECT_EQ(check(dst, 200, 9), "");
  EXPECT_TRUE(LogCapture::contains("1 eager message(s) written again")) << LogCapture::all();
}

// The same drop without failover: the comm fails.
TEST_F(IbFailover, WithoutFailoverTheCommFails) {
  env.set("NCCL_IB_RESILIENCY_PORT_FAILOVER", "0");
  run([&](int k) {
    if (k == 12) N->drop(&W->hcas[2], 1);
  }, false);
}

}  // namespace
