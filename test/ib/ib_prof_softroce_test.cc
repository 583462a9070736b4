// NCCL profiler events of the IB transport on real soft-RoCE: one start and one stop per
// work request a message posts on a QP (each data write of an isend, each receive WR of an
// irecv), under the phandle NCCL passed, with NCCL's plugin id and descriptor: the comm's
// QP numbers, the slot as wr_id, and the writes' lengths adding up to the message; without
// a callback, no call. Both ends in this process, rxe1 -> rxe0.
#include <set>
#include "net_pair.h"
#include "prof_recorder.h"
#include "test_util.h"

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "../../src/transport/net_ib/comm.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}
#include "ib_test_env.h"

namespace {

const ncclNet_t* ib = &railnetNetIb;

class IbProfTest : public IbTwoDevicesTest {
 protected:
  void* lc = nullptr;
  void* sc = nullptr;
  void* rc = nullptr;
  void start(ncclProfilerCallback_t prof) {
    ProfRecorder::clear();
    ASSERT_EQ(ib->init(&ctx, 0, nullptr, nullptr, prof), ncclSuccess);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
    ASSERT_TRUE(netConnectPair(ib, ctx, 1, handle, lc, &sc, &rc, 60000));
  }
  void TearDown() override {
    if (sc) ib->closeSend(sc);
    if (rc) ib->closeRecv(rc);
    if (lc) ib->closeListen(lc);
    IbTwoDevicesTest::TearDown();
  }
  // One message of size bytes under the parents sendPh / recvPh; "" or what went wrong.
  std::string move(size_t size, void* sendPh, void* recvPh) {
    std::vector<char> a(size ? size : 1, 'a'), b(size + 64, 0);
    void *mha = nullptr, *mhb = nullptr, *rr = nullptr, *sr = nullptr;
    if (ib->regMr(sc, a.data(), a.size(), NCCL_PTR_HOST, &mha) != ncclSuccess ||
        ib->regMr(rc, b.data(), b.size(), NCCL_PTR_HOST, &mhb) != ncclSuccess)
      return "regMr failed";
    void* data = b.data();
    size_t bsize = b.size();
    int tag = 3;
    long long deadline = netNowNs() + 60000000000LL;
    if (ib->irecv(rc, 1, &data, &bsize, &tag, &mhb, &recvPh, &rr) != ncclSuccess || rr == nullptr)
      return "irecv failed";
    // the receive is tested while the isend is not taken, as NCCL's proxy does: with eager
    // messages on, a message above the eager size asks for its clear-to-send, which the
    // receiver's test() answers
    int rdone = 0, s1 = -1, s2 = -1;
    while (sr == nullptr && netNowNs() < deadline) {
      if (ib->isend(sc, a.data(), size, tag, mha, sendPh, &sr) != ncclSuccess) return "isend failed";
      if (sr == nullptr && !rdone && ib->test(rr, &rdone, &s2) != ncclSuccess) return "receive test failed";
    }
    std::string err;
    if (sr == nullptr) return "no clear-to-send";
    if (!netWait(ib, sr, &s1, deadline, &err) || (!rdone && !netWait(ib, rr, &s2, deadline, &err))) return err;
    ib->deregMr(sc, mha);
    ib->deregMr(rc, mhb);
    return s2 == (int)size ? "" : "receiver reported " + std::to_string(s2);
  }
  static std::set<int> qpNums(void* comm) {
    std::set<int> s;
    struct ncclIbNetCommBase* base = (struct ncclIbNetCommBase*)comm;
    for (int q = 0; q < base->nqps; q++) s.insert((int)base->qps[q].qp->qp_num);
    return s;
  }
  // One side's events: well formed, on this comm's QPs, one per QP the message used.
  void checkSide(void* ph, void* comm, bool send, size_t size, size_t wantEvents) {
    std::vector<ProfEvent> ev = ProfRecorder::under(ph);
    ASSERT_EQ(ev.size(), wantEvents) << (send ? "sender" : "receiver") << ", message of " << size << " bytes";
    std::set<int> qps = qpNums(comm), seen;
    size_t sum = 0;
    for (auto& e : ev) {
      EXPECT_EQ(e.pluginId, (int64_t)(NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER));
      EXPECT_EQ(e.qd.type, ncclProfileQp);
      EXPECT_EQ(e.stops, 1) << "each event is stopped once";
      EXPECT_TRUE(qps.count(e.qd.qp.qpNum)) << "QP " << e.qd.qp.qpNum << " is none of the comm's";
      EXPECT_TRUE(seen.insert(e.qd.qp.qpNum).second) << "one event per QP";
      EXPECT_LT(e.qd.qp.wr_id, (uint64_t)RAILNET_IB_FIFO_SLOTS);
      if (send) {
        EXPECT_TRUE(e.qd.qp.opcode == IBV_WR_RDMA_WRITE || e.qd.qp.opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
      } else {
        EXPECT_EQ(e.qd.qp.opcode, (int)IBV_WC_RECV);
      }
      sum += e.qd.qp.length;
    }
    if (send) {
      EXPECT_EQ(sum, size) << "the writes' lengths add up to the message";
    } else {
      EXPECT_EQ(sum, 0u) << "a receive work request moves no bytes itself";
    }
  }
};

// The clear-to-send protocol (RAILNET_IB_EAGER_SIZE=0): its receive WRs are posted per irecv.
TEST_F(IbProfTest, EventPerWorkRequestOnEachQp) {
  env.set("RAILNET_IB_EAGER_SIZE", "0");
  env.set("NCCL_IB_QPS_PER_CONNECTION", "2");
  env.set("NCCL_IB_SPLIT_DATA_ON_QPS", "1");
  start(ProfRecorder::callback);
  ASSERT_EQ(((struct ncclIbNetCommBase*)sc)->nqps, 2);
  const size_t sizes[] = {8, 4096, 1048576 + 5};
  char parents[2 * 3];
  for (int k = 0; k < 3; k++) {
    ASSERT_EQ(move(sizes[k], &parents[2 * k], &parents[2 * k + 1]), "");
    checkSide(&parents[2 * k], sc, true, sizes[k], 2);
    checkSide(&parents[2 * k + 1], rc, false, sizes[k], 2);
  }
  EXPECT_EQ(ProfRecorder::badCalls(), 0);
}

TEST_F(IbProfTest, OneQpPerMessageWithoutSplitting) {
  env.set("RAILNET_IB_EAGER_SIZE", "0");
  env.set("NCCL_IB_QPS_PER_CONNECTION", "2");
  env.set("NCCL_IB_SPLIT_DATA_ON_QPS", "0");
  start(ProfRecorder::callback);
  char parents[2 * 4];
  for (int k = 0; k < 4; k++) {
    ASSERT_EQ(move(65536, &parents[2 * k], &parents[2 * k + 1]), "");
    checkSide(&parents[2 * k], sc, true, 65536, 1);
    checkSide(&parents[2 * k + 1], rc, false, 65536, 1);
  }
}

// At the default settings (eager messages on, RAILNET_IB_EAGER_SIZE unset): an eager message
// split over 2 QPs has an event for its write on one QP and for its mark on the other, its
// length the message's; so has a larger message's pair of data writes. The receiver's work
// requests are pre-posted for the eager messages, so no irecv posts one and none has an event.
// After the comm's first small message (through its clear-to-send: it takes the receiver's
// ring from the eager pool), the 8-byte message goes eagerly (its irecv is small: no
// clear-to-send), and so does the 4096-byte one after it (eager messages came: no
// clear-to-send for any irecv); their events are the whole message and a mark of 0 bytes (a
// clear-to-send write splits 4096 in halves).
TEST_F(IbProfTest, EagerWritesAtTheDefaultsHaveTheirEvents) {
  env.set("RAILNET_IB_EAGER_SIZE", nullptr);
  env.set("NCCL_IB_QPS_PER_CONNECTION", "2");
  env.set("NCCL_IB_SPLIT_DATA_ON_QPS", "1");
  LogCapture cap;
  start(ProfRecorder::callback);
  ASSERT_TRUE(LogCapture::contains("messages up to 4096 bytes come eagerly")) << LogCapture::all();
  char first[2];
  ASSERT_EQ(move(8, &first[0], &first[1]), "");  // takes the ring; its events are not looked at
  const size_t sizes[] = {8, 4096, 1048576 + 5, 0};
  char parents[2 * 4];
  for (int k = 0; k < 4; k++) {
    ASSERT_EQ(move(sizes[k], &parents[2 * k], &parents[2 * k + 1]), "");
    checkSide(&parents[2 * k], sc, true, sizes[k], 2);
    checkSide(&parents[2 * k + 1], rc, false, sizes[k], 0);
    if (k < 2) {
      std::multiset<size_t> lengths;
      for (auto& e : ProfRecorder::under(&parents[2 * k])) lengths.insert(e.qd.qp.length);
      EXPECT_EQ(lengths, (std::multiset<size_t>{0, sizes[k]})) << "message of " << sizes[k] << " bytes";
    }
  }
  EXPECT_EQ(ProfRecorder::badCalls(), 0);
}

TEST_F(IbProfTest, NoCallbackNoCalls) {
  start(nullptr);
  char parents[2];
  ASSERT_EQ(move(65536, &parents[0], &parents[1]), "");
  EXPECT_EQ(ProfRecorder::count(), 0u);
}

}  // namespace
