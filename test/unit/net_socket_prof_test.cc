// NCCL profiler events of the Socket transport: one start and one stop per socket operation
// (each chunk on a data socket, and what a message carries on the control socket), under
// the phandle NCCL passed, with NCCL's plugin id and descriptor; their lengths add up to the
// message; without a callback, no call at all.
#include <set>
#include "net_pair.h"
#include "prof_recorder.h"
#include "test_util.h"

extern "C" {
#include "../../src/transport/net_socket_types.h"
#include "railnet.h"
}

namespace {

const ncclNet_t* net() { return railnetGetNet("socket"); }

struct NetSocketProf : ::testing::Test {
  ScopedEnv env;
  void* ctx = nullptr;
  void* lc = nullptr;
  void* sc = nullptr;
  void* rc = nullptr;
  void start(const char* nthreads, const char* nsocks, ncclProfilerCallback_t prof) {
    env.set("NCCL_SOCKET_IFNAME", "lo");
    env.set("NCCL_SOCKET_NTHREADS", nthreads);
    env.set("NCCL_NSOCKS_PERTHREAD", nsocks);
    ProfRecorder::clear();
    ASSERT_EQ(net()->init(&ctx, 0, nullptr, nullptr, prof), ncclSuccess);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
    ASSERT_TRUE(netConnectPair(net(), ctx, 0, handle, lc, &sc, &rc));
  }
  // Buffers live until the comms are closed (NCCL's rule): a failed or late message must not
  // leave helper threads writing into freed memory.
  std::vector<std::vector<char>> buffers;
  void TearDown() override {
    if (sc) net()->closeSend(sc);
    if (rc) net()->closeRecv(rc);
    if (lc) net()->closeListen(lc);
    if (ctx) net()->finalize(ctx);
    buffers.clear();
  }
  // One message of size bytes, sent under sendPh and received under recvPh.
  void move(size_t size, void* sendPh, void* recvPh) {
    buffers.emplace_back(size + 1, 'x');
    buffers.emplace_back(size + 1, 0);
    std::vector<char>& out = buffers[buffers.size() - 2];
    std::vector<char>& in = buffers.back();
    void* sreq = nullptr;
    void* rreq = nullptr;
    size_t rsize = size;
    int tag = 7;
    void* rdata = in.data();
    void* mh = nullptr;
    long long deadline = netNowNs() + 120000000000LL; /* valgrind (memcheck tier) is slow */
    while (rreq == nullptr && netNowNs() < deadline)
      ASSERT_EQ(net()->irecv(rc, 1, &rdata, &rsize, &tag, &mh, &recvPh, &rreq), ncclSuccess);
    while (sreq == nullptr && netNowNs() < deadline)
      ASSERT_EQ(net()->isend(sc, out.data(), size, tag, nullptr, sendPh, &sreq), ncclSuccess);
    ASSERT_NE(sreq, nullptr);
    ASSERT_NE(rreq, nullptr);
    int sdone = 0, rdone = 0, n = -1;
    while ((!sdone || !rdone) && netNowNs() < deadline) {
      if (!sdone) {
        ASSERT_EQ(net()->test(sreq, &sdone, nullptr), ncclSuccess);
      }
      if (!rdone) {
        ASSERT_EQ(net()->test(rreq, &rdone, &n), ncclSuccess);
      }
    }
    ASSERT_TRUE(sdone && rdone) << "message of " << size << " bytes did not complete in 120 s";
    EXPECT_EQ(n, (int)size);
  }
  // The events of one side of one message: well formed, on this comm's sockets, adding up.
  void checkSide(void* ph, socketComm* c, int op, size_t size, bool dataSockets) {
    std::vector<ProfEvent> ev = ProfRecorder::under(ph);
    ASSERT_FALSE(ev.empty()) << "no event for a message of " << size << " bytes";
    std::set<int> dataFds;
    for (int s = 0; s < c->nSocks; s++) dataFds.insert(c->socks[s].fd);
    size_t sum = 0;
    int onCtrl = 0;
    for (auto& e : ev) {
      EXPECT_EQ(e.pluginId, (int64_t)(NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER));
      EXPECT_EQ(e.sd.type, ncclProfileSocket);
      EXPECT_EQ(e.sd.sock.op, op);
      EXPECT_EQ(e.stops, 1) << "each event is stopped once";
      if (e.sd.sock.fd == c->ctrl.fd) {
        onCtrl++;
      } else {
        EXPECT_TRUE(dataFds.count(e.sd.sock.fd)) << "fd " << e.sd.sock.fd << " is none of the comm's sockets";
      }
      sum += e.sd.sock.length;
    }
    EXPECT_EQ(onCtrl, 1) << "one event for the control socket's part";
    EXPECT_EQ(sum, size) << "the events' lengths add up to the message";
    // payloads up to the sender's RAILNET_SOCKET_CTRL_PAYLOAD follow their record
    size_t ctrlMax = ((socketComm*)sc)->ctrlMax;
    if (dataSockets && size > (size_t)c->inlineSize && size > ctrlMax) {
      EXPECT_GE(ev.size(), 2u) << "chunks on the data sockets";
    } else {
      EXPECT_EQ(ev.size(), 1u) << "a message of " << size << " bytes all on the control socket";
    }
  }
};

const size_t kSizes[] = {0, 8, 128, 129, 65536, 1048576 + 3};

// With data sockets, the payloads up to RAILNET_SOCKET_CTRL_PAYLOAD (default 64 KiB) follow
// their records on the control socket; 0 keeps NCCL's layout (every payload larger than
// inline on the data sockets).
class NetSocketProfCtrl : public NetSocketProf, public ::testing::WithParamInterface<const char*> {};

TEST_P(NetSocketProfCtrl, EventPerSocketOperationWithHelperThreads) {
  env.set("RAILNET_SOCKET_CTRL_PAYLOAD", GetParam());
  start("2", "2", ProfRecorder::callback);
  socketComm* s = (socketComm*)sc;
  socketComm* r = (socketComm*)rc;
  ASSERT_EQ(s->nSocks, 4);
  EXPECT_EQ(s->ctrlMax, GetParam() ? (size_t)atoi(GetParam()) : (size_t)65536);
  char parents[2 * 6];
  for (int k = 0; k < 6; k++) {
    move(kSizes[k], &parents[2 * k], &parents[2 * k + 1]);
    checkSide(&parents[2 * k], s, NCCL_SOCKET_SEND, kSizes[k], true);
    checkSide(&parents[2 * k + 1], r, NCCL_SOCKET_RECV, kSizes[k], true);
  }
  EXPECT_EQ(ProfRecorder::badCalls(), 0);
}

INSTANTIATE_TEST_SUITE_P(Payload, NetSocketProfCtrl, ::testing::Values(nullptr, "0", "16384"));

TEST_F(NetSocketProf, EventPerMessageOnTheControlSocketWithoutDataSockets) {
  start("0", "0", ProfRecorder::callback);
  ASSERT_EQ(((socketComm*)sc)->nSocks, 0);
  char parents[2 * 6];
  for (int k = 0; k < 6; k++) {
    move(kSizes[k], &parents[2 * k], &parents[2 * k + 1]);
    checkSide(&parents[2 * k], (socketComm*)sc, NCCL_SOCKET_SEND, kSizes[k], false);
    checkSide(&parents[2 * k + 1], (socketComm*)rc, NCCL_SOCKET_RECV, kSizes[k], false);
  }
  EXPECT_EQ(ProfRecorder::badCalls(), 0);
}

TEST_F(NetSocketProf, NoCallbackNoCalls) {
  start("2", "2", nullptr);
  char parents[2];
  move(1048576, &parents[0], &parents[1]);
  EXPECT_EQ(ProfRecorder::count(), 0u);
}

TEST_F(NetSocketProf, NoParentNoCalls) {
  start("2", "2", ProfRecorder::callback);
  move(1048576, nullptr, nullptr);
  EXPECT_EQ(ProfRecorder::count(), 0u);
}

}  // namespace
