// The IB data path on real soft-RoCE (the tier's VM: rxe0/rxe1 on a veth pair): connection
// setup, RDMA-write transfers with the clear-to-send fifo, multi-receive, QPs per
// connection, registration cache, and the errors a user meets. Transfers run between two
// processes: the receiver (this process) on device 0 (rxe0), the sender (a forked child)
// on device 1 (rxe1). Skips when libibverbs lists no active port.
#include "test_util.h"
#include <sys/resource.h>
#include "caps.h"
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>
#include <functional>
#include <string>
#include <vector>
#include <arpa/inet.h>
#include "net_pair.h"

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "socket.h"
#include "../../src/transport/net_ib/comm.h"
#include "../../src/transport/net_ib/devices.h"
#include "../../src/transport/net_ib/reg.h"
#include "../../src/transport/net_ib/wire.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
#include "../../src/transport/net_ib/gdr.h"
}
#include "ib_test_env.h"

namespace {

const ncclNet_t* ib = &railnetNetIb;

// NetPlan with twice its default deadline: the tier's VM is emulated (TCG).
struct Plan : NetPlan {
  Plan() { deadlineMs = 120000; }
};

// Moves `sizes` from sc to rc in this process (receive posted first), checking data and sizes.
std::string moveInProcess(void* sc, void* rc, const std::vector<size_t>& sizes, int seed) {
  long long deadline = netNowNs() + 60000000000LL;
  for (size_t k = 0; k < sizes.size(); k++) {
    std::vector<char> a(sizes[k] ? sizes[k] : 1), b(sizes[k] + 64);
    netPatternFill(a.data(), sizes[k], seed + (int)k);
    void *mha = nullptr, *mhb = nullptr, *rr = nullptr, *sr = nullptr;
    if (ib->regMr(sc, a.data(), a.size(), NCCL_PTR_HOST, &mha) != ncclSuccess ||
        ib->regMr(rc, b.data(), b.size(), NCCL_PTR_HOST, &mhb) != ncclSuccess)
      return "regMr failed";
    void* data = b.data();
    size_t size = b.size();
    int tag = (int)k;
    if (ib->irecv(rc, 1, &data, &size, &tag, &mhb, nullptr, &rr) != ncclSuccess || rr == nullptr)
      return "irecv failed";
    // isend until taken, testing the receive meanwhile as NCCL's proxy does (with eager
    // messages a larger one may ask for its clear-to-send, which the receiver's test() answers)
    int rdone = 0, rsize = -1;
    while (sr == nullptr && netNowNs() < deadline) {
      if (ib->isend(sc, a.data(), sizes[k], (int)k, mha, nullptr, &sr) != ncclSuccess) return "isend failed";
      if (sr == nullptr && !rdone && ib->test(rr, &rdone, &rsize) != ncclSuccess) return "receive failed";
    }
    std::string err;
    int s1 = -1, s2 = -1;
    if (sr == nullptr) return "no clear-to-send";
    if (!netWait(ib, sr, &s1, deadline, &err)) return err;
    if (rdone) s2 = rsize;
    else if (!netWait(ib, rr, &s2, deadline, &err)) return err;
    if (s2 != (int)sizes[k]) return "message " + std::to_string(k) + ": receiver reported " + std::to_string(s2);
    size_t bad = 0;
    if (!netPatternCheck(b.data(), sizes[k], seed + (int)k, &bad))
      return "message " + std::to_string(k) + ": wrong byte at " + std::to_string(bad);
    ib->deregMr(sc, mha);
    ib->deregMr(rc, mhb);
  }
  return "";
}

class IbP2pTest : public IbTwoDevicesTest {
 protected:
  void init() { initTwoDevices(); }
  // listen on device listenDev, connect from device connectDev, both ends in this process
  bool pairInProcess(int listenDev, int connectDev, char* handle, void** lc, void** sc, void** rc) {
    return ib->listen(ctx, listenDev, handle, lc) == ncclSuccess &&
           netConnectPair(ib, ctx, connectDev, handle, *lc, sc, rc);
  }

  // The sender runs in a child on device 1; the receiver here on device 0. Returns what
  // went wrong on either side ("" when both succeeded). childLog gets the child's stderr.
  std::string transfer(const Plan& plan, std::string* childLog = nullptr, bool expectSendFail = false) {
    railnetIbResetDevices();
    int hp[2], lp[2];
    if (pipe(hp) != 0 || pipe(lp) != 0) return "pipe failed";
    pid_t pid = fork();
    if (pid == 0) {
      close(hp[1]);
      close(lp[0]);
      dup2(lp[1], 2);
      railnetSetLogger(ibChildLogger);
      char handle[NCCL_NET_HANDLE_MAXSIZE];
      size_t got = 0;
      while (got < sizeof(handle)) {
        ssize_t r = read(hp[0], handle + got, sizeof(handle) - got);
        if (r <= 0) _exit(3);
        got += (size_t)r;
      }
      void* cctx = nullptr;
      if (ib->init(&cctx, 0, nullptr, nullptr, nullptr) != ncclSuccess) _exit(4);
      std::string err;
      void* comm = netConnect(ib, cctx, 1, handle, netNowNs() + 60000000000LL, &err);
      if (comm == nullptr) {
        fprintf(stderr, "sender: %s\n", err.c_str());
        _exit(5);
      }
      NetSideBuffers bufs;
      err = netRunSide(ib, comm, true, plan, &bufs);
      if (!err.empty()) fprintf(stderr, "sender: %s\n", err.c_str());
      // let the receiver see the last completions before the QPs go
      usleep(200000);
      ib->closeSend(comm);
      ib->finalize(cctx);
      _exit(err.empty() ? 0 : 6);
    }
    close(hp[0]);
    close(lp[1]);
    std::string result;
    void* rctx = nullptr;
    void* lc = nullptr;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    if (ib->init(&rctx, 0, nullptr, nullptr, nullptr) != ncclSuccess) result = "receiver init failed";
    if (result.empty() && ib->listen(rctx, 0, handle, &lc) != ncclSuccess) result = "listen failed";
    if (result.empty() && write(hp[1], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) result = "pipe write";
    close(hp[1]);
    void* comm = nullptr;
    NetSideBuffers bufs;  // until the comm is closed
    if (result.empty() && !expectSendFail) {
      comm = netAccept(ib, lc, netNowNs() + 60000000000LL, &result, pid);
      if (comm) result = netRunSide(ib, comm, false, plan, &bufs);
      if (!result.empty()) result = "receiver: " + result;
    } else if (result.empty()) {
      comm = netAccept(ib, lc, netNowNs() + 60000000000LL, &result);
      if (comm) netRunSide(ib, comm, false, plan, &bufs); /* times out: the sender gave up */
    }
    std::string log;
    int status = 0;
    if (!result.empty() && !expectSendFail) kill(pid, SIGKILL);
    char buf[4096];
    ssize_t r;
    while ((r = read(lp[0], buf, sizeof(buf))) > 0) log.append(buf, (size_t)r);
    close(lp[0]);
    waitpid(pid, &status, 0);
    if (childLog) *childLog = log;
    if (comm) ib->closeRecv(comm);
    if (lc) ib->closeListen(lc);
    if (rctx) ib->finalize(rctx);
    railnetIbResetDevices();
    bool childOk = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (expectSendFail) return childOk ? "the sender succeeded" : "";
    if (!childOk && result.empty()) result = "sender exited with status " + std::to_string(status) + ": " + log;
    return result;
  }
};

TEST_F(IbP2pTest, IntegrityAcrossSizes) {
  Plan p;
  p.sizes = {0, 1, 7, 4095, 4096, 65536 + 3, 1 << 20, (1 << 20) + 3, 8 << 20};
  EXPECT_EQ(transfer(p), "");
}

TEST_F(IbP2pTest, ReceiveLargerThanSendReportsTheSentSize) {
  Plan p;
  p.groups = {{NetMsg{100, 4096}}, {NetMsg{0, 64}}, {NetMsg{65536, 1 << 20}}};
  EXPECT_EQ(transfer(p), "");
}

TEST_F(IbP2pTest, MaxRequestsInFlight) {
  Plan p;
  for (int i = 0; i < 3 * NCCL_NET_MAX_REQUESTS; i++) p.groups.push_back({NetMsg{(size_t)(i * 997) % 70000, 70000}});
  p.inflight = NCCL_NET_MAX_REQUESTS;
  EXPECT_EQ(transfer(p), "");
}

TEST_F(IbP2pTest, MultiReceiveOfEightTaggedBuffers) {
  Plan p;
  std::vector<NetMsg> g;
  for (int i = 0; i < NCCL_NET_IB_MAX_RECVS; i++) g.push_back(NetMsg{(size_t)(i * 4099 + i), (size_t)(i * 4099 + 64)});
  for (int k = 0; k < 6; k++) p.groups.push_back(g);
  p.groups.push_back({NetMsg{5, 5}, NetMsg{0, 0}});
  p.inflight = 3;
  p.reverseSendTags = true;
  EXPECT_EQ(transfer(p), "");
}

class IbQpTest : public IbP2pTest, public ::testing::WithParamInterface<std::tuple<int, int>> {};

TEST_P(IbQpTest, QpsPerConnectionAndSplit) {
  int nqps = std::get<0>(GetParam()), split = std::get<1>(GetParam());
  env.set("NCCL_IB_QPS_PER_CONNECTION", std::to_string(nqps).c_str());
  env.set("NCCL_IB_SPLIT_DATA_ON_QPS", std::to_string(split).c_str());
  railnetParamReset();
  Plan p;
  p.sizes = {0, 1, 200, 4096 * 3 + 5, (1 << 20) + 3};
  for (int i = 0; i < 20; i++) p.groups.push_back({NetMsg{(size_t)i * 1000 + 1, 20000}});
  p.groups.push_back({NetMsg{300, 300}, NetMsg{70000, 70000}, NetMsg{0, 10}});
  p.inflight = 8;
  EXPECT_EQ(transfer(p), "");
}

INSTANTIATE_TEST_SUITE_P(Qps, IbQpTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values(0, 1)));

TEST_F(IbP2pTest, InlineClearToSend) {
  env.set("NCCL_IB_USE_INLINE", "1");
  railnetParamReset();
  Plan p;
  p.sizes = {1, 4096, 100000};
  p.groups.push_back({NetMsg{10, 10}, NetMsg{20, 20}, NetMsg{30, 30}});
  EXPECT_EQ(transfer(p), "");
}

TEST_F(IbP2pTest, ReceiveSmallerThanSendFailsTheSenderWithBothSizes) {
  Plan p;
  p.groups = {{NetMsg{8192, 4096}}};
  p.deadlineMs = 3000;
  std::string log;
  EXPECT_EQ(transfer(p, &log, true), "");
  EXPECT_NE(log.find("message of 8192 bytes"), std::string::npos) << log;
  EXPECT_NE(log.find("has 4096 bytes"), std::string::npos) << log;
}

TEST_F(IbP2pTest, GarbageHandleIsRefused) {
  init();
  LogCapture cap;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  for (size_t i = 0; i < sizeof(handle); i++) handle[i] = (char)(i * 37 + 11);
  void* comm = nullptr;
  EXPECT_EQ(ib->connect(ctx, 1, handle, &comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_TRUE(LogCapture::contains("not a railnet IB handle")) << LogCapture::all();
  // a real handle cut short: magic right, address zeroed
  void* lc = nullptr;
  ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
  char cut[NCCL_NET_HANDLE_MAXSIZE];
  memset(cut, 0, sizeof(cut));
  memcpy(cut, handle, 8);
  EXPECT_EQ(ib->connect(ctx, 1, cut, &comm, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(LogCapture::contains("connect handle is invalid")) << LogCapture::all();
  ib->closeListen(lc);
}

TEST_F(IbP2pTest, GarbageMetadataIsRefusedAndTheListenerStillWorks) {
  init();
  LogCapture cap;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
  struct ncclIbHandle* h = (struct ncclIbHandle*)handle;
  // a peer that passes the socket handshake, then sends garbage of the metadata's size
  struct ncclSocket bad;
  ASSERT_EQ(ncclSocketInit(&bad, &h->connectAddr, h->socketMagic, ncclSocketTypeNetIb, nullptr, 0), ncclSuccess);
  ASSERT_EQ(ncclSocketConnect(&bad), ncclSuccess);
  std::vector<char> junk(sizeof(struct ncclIbConnectionMetadata));
  for (size_t i = 0; i < junk.size(); i++) junk[i] = (char)(i * 13 + 5);
  ASSERT_EQ(ncclSocketSend(&bad, junk.data(), (int)junk.size()), ncclSuccess);
  void* rc = nullptr;
  long long deadline = netNowNs() + 10000000000LL;
  while (!LogCapture::contains("refused the connection from") && netNowNs() < deadline) {
    ASSERT_EQ(ib->accept(lc, &rc, nullptr), ncclSuccess);
    ASSERT_EQ(rc, nullptr);
  }
  EXPECT_TRUE(LogCapture::contains("not railnet's")) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("198.18.0.") || LogCapture::contains("127.0.0.1") ||
              LogCapture::contains("<"))
      << LogCapture::all();
  ncclSocketClose(&bad);
  // truncated metadata: half of it, then close
  struct ncclSocket half;
  ASSERT_EQ(ncclSocketInit(&half, &h->connectAddr, h->socketMagic, ncclSocketTypeNetIb, nullptr, 0), ncclSuccess);
  ASSERT_EQ(ncclSocketConnect(&half), ncclSuccess);
  ASSERT_EQ(ncclSocketSend(&half, junk.data(), (int)junk.size() / 2), ncclSuccess);
  ncclSocketClose(&half);
  deadline = netNowNs() + 10000000000LL;
  while (!LogCapture::contains("closed the connection after") && netNowNs() < deadline) {
    ASSERT_EQ(ib->accept(lc, &rc, nullptr), ncclSuccess);
    ASSERT_EQ(rc, nullptr);
  }
  EXPECT_TRUE(LogCapture::contains("closed the connection after")) << LogCapture::all();
  // a real connection is still accepted, and moves data (same process, rxe1 -> rxe0)
  void *sc = nullptr, *rcv = nullptr;
  ASSERT_TRUE(netConnectPair(ib, ctx, 1, handle, lc, &sc, &rcv));
  EXPECT_EQ(moveInProcess(sc, rcv, {5000}, 3), "") << LogCapture::all();
  ib->closeSend(sc);
  ib->closeRecv(rcv);
  ib->closeListen(lc);
}

TEST_F(IbP2pTest, RegistrationCacheHitsAndReleases) {
  init();
  void *sc = nullptr, *rc = nullptr, *lc = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
  ASSERT_TRUE(netConnectPair(ib, ctx, 1, handle, lc, &sc, &rc));
  int dev = ncclIbMergedDevs[1].vProps.devs[0];
  int before = railnetIbMrCacheCount(dev);
  long hits = railnetIbMrCacheHits();
  std::vector<char> big(1 << 20);
  void *m1 = nullptr, *m2 = nullptr, *m3 = nullptr;
  ASSERT_EQ(ib->regMr(sc, big.data(), big.size(), NCCL_PTR_HOST, &m1), ncclSuccess);
  EXPECT_EQ(railnetIbMrCacheCount(dev), before + 1);
  ASSERT_EQ(ib->regMr(sc, big.data() + 8192, 4096, NCCL_PTR_HOST, &m2), ncclSuccess);
  ASSERT_EQ(ib->regMr(sc, big.data(), big.size(), NCCL_PTR_HOST, &m3), ncclSuccess);
  EXPECT_EQ(railnetIbMrCacheCount(dev), before + 1);
  EXPECT_EQ(railnetIbMrCacheHits(), hits + 2);
  EXPECT_EQ(((struct ncclIbMrHandle*)m1)->mrs[0], ((struct ncclIbMrHandle*)m2)->mrs[0]);
  EXPECT_EQ(ib->deregMr(sc, m1), ncclSuccess);
  EXPECT_EQ(ib->deregMr(sc, m2), ncclSuccess);
  EXPECT_EQ(railnetIbMrCacheCount(dev), before + 1);
  EXPECT_EQ(ib->deregMr(sc, m3), ncclSuccess);
  EXPECT_EQ(railnetIbMrCacheCount(dev), before);
  ib->closeSend(sc);
  ib->closeRecv(rc);
  ib->closeListen(lc);
}

// RLIMIT_MEMLOCK below the buffer (root's CAP_IPC_LOCK dropped, in a child): regMr
// through the transport fails with the WARN of ibv_reg_mr and the memlock HINT.
TEST_F(IbP2pTest, RegMrBeyondMemlockLimitFailsWithTheHint) {
  int lp[2];
  ASSERT_EQ(pipe(lp), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(lp[0]);
    LogCapture log;
    void *sc = nullptr, *rc = nullptr, *lc = nullptr;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    std::string why;
    struct rlimit low = {64 * 1024, 64 * 1024};
    std::vector<char> big(4 << 20, 1);
    void* mh = nullptr;
    int rcode = 0;
    if (ib->init(&ctx, 0, nullptr, nullptr, nullptr) != ncclSuccess || ib->listen(ctx, 0, handle, &lc) != ncclSuccess ||
        !netConnectPair(ib, ctx, 1, handle, lc, &sc, &rc))
      rcode = 2;
    else if (!dropIpcLock(&why) || setrlimit(RLIMIT_MEMLOCK, &low) != 0)
      rcode = 3;
    else if (ib->regMr(sc, big.data(), big.size(), NCCL_PTR_HOST, &mh) == ncclSuccess)
      rcode = 4;
    std::string all = LogCapture::all() + why;
    if (write(lp[1], all.data(), all.size()) < 0) rcode = 5;
    _exit(rcode);
  }
  close(lp[1]);
  std::string out;
  char buf[4096];
  ssize_t k;
  while ((k = read(lp[0], buf, sizeof(buf))) > 0) out.append(buf, k);
  close(lp[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  if (WEXITSTATUS(status) == 3) RAILNET_SKIP("cannot drop CAP_IPC_LOCK or lower RLIMIT_MEMLOCK here: " + out);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2 setup, 4 regMr succeeded under a 64 KiB limit\n" << out;
  EXPECT_NE(out.find("Call to ibv_reg_mr"), std::string::npos) << out;
  EXPECT_NE(out.find("RLIMIT_MEMLOCK"), std::string::npos) << out;
  EXPECT_NE(out.find("memlock unlimited"), std::string::npos) << out;
}

TEST_F(IbP2pTest, CloseWithRequestsInFlight) {
  init();
  void *sc = nullptr, *rc = nullptr, *lc = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
  ASSERT_TRUE(netConnectPair(ib, ctx, 1, handle, lc, &sc, &rc));
  std::vector<char> b(4096 * 8);
  void* mh = nullptr;
  ASSERT_EQ(ib->regMr(rc, b.data(), b.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
  for (int i = 0; i < 8; i++) {
    void* data = b.data() + i * 4096;
    size_t size = 4096;
    int tag = i;
    void* req = nullptr;
    ASSERT_EQ(ib->irecv(rc, 1, &data, &size, &tag, &mh, nullptr, &req), ncclSuccess);
    ASSERT_NE(req, nullptr);
  }
  EXPECT_EQ(ib->deregMr(rc, mh), ncclSuccess);
  EXPECT_EQ(ib->closeRecv(rc), ncclSuccess);
  EXPECT_EQ(ib->closeSend(sc), ncclSuccess);
  EXPECT_EQ(ib->closeListen(lc), ncclSuccess);
  EXPECT_EQ(railnetIbMrCacheCount(ncclIbMergedDevs[0].vProps.devs[0]), 0);
}

TEST_F(IbP2pTest, EmptyGidIndexFailsTheConnectionWithAHint) {
  env.set("NCCL_IB_GID_INDEX", "7");
  railnetParamReset();
  init();
  LogCapture cap;
  void *sc = nullptr, *rc = nullptr, *lc = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
  EXPECT_FALSE(netConnectPair(ib, ctx, 1, handle, lc, &sc, &rc, 10000));
  EXPECT_TRUE(LogCapture::contains("INIT->RTR")) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("GID")) << LogCapture::all();
  if (sc) ib->closeSend(sc);
  if (rc) ib->closeRecv(rc);
  ib->closeListen(lc);
}

}  // namespace

namespace {

// Adaptive routing on (NCCL_IB_ADAPTIVE_ROUTING=1): messages above NCCL_IB_AR_THRESHOLD go
// as plain writes followed by a 0-byte write with immediate.
TEST_F(IbP2pTest, AdaptiveRoutingAboveTheThreshold) {
  env.set("NCCL_IB_ADAPTIVE_ROUTING", "1");
  env.set("NCCL_IB_AR_THRESHOLD", "4096");
  railnetParamReset();
  Plan p;
  p.sizes = {0, 100, 4096, 4097, 300000};
  EXPECT_EQ(transfer(p), "");
}

TEST_F(IbP2pTest, SixtyFourMiB) {
  Plan p;
  p.sizes = {64u << 20};
  EXPECT_EQ(transfer(p), "");
}

// ------------------------------------------------------------------ malicious peers
// Hand-written peers (and one comm misused on purpose) send what a real railnet never
// would; each ends in a WARN naming the peer and an error, never in a write out of bounds.

// The receiver announces 1 MiB in its clear-to-send but registered only the first 4 KiB:
// the sender's RDMA write is refused by the receiving NIC (remote access error), the
// sender's test() fails with the status and the registration HINT, and not one byte past
// the registration changes. At NCCL's default timeouts: the NIC refuses the write at once,
// no retry is involved.
TEST_F(IbP2pTest, ClearToSendAnnouncingMoreThanTheRegistrationFailsWithRemoteAccessError) {
  init();
  LogCapture cap;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_TRUE(pairInProcess(0, 1, handle, &lc, &sc, &rc));
  const size_t kBig = 1 << 20;
  char* dst = (char*)aligned_alloc(4096, kBig);
  std::vector<char> src(kBig);
  ASSERT_NE(dst, nullptr);
  memset(dst, 0x5a, kBig);
  netPatternFill(src.data(), kBig, 11);
  void *smh = nullptr, *rmh = nullptr;
  ASSERT_EQ(ib->regMr(sc, src.data(), kBig, NCCL_PTR_HOST, &smh), ncclSuccess);
  ASSERT_EQ(ib->regMr(rc, dst, 4096, NCCL_PTR_HOST, &rmh), ncclSuccess);
  void* data = dst;
  size_t size = kBig;  // more than rmh covers
  int tag = 1;
  void *rr = nullptr, *sr = nullptr;
  ASSERT_EQ(ib->irecv(rc, 1, &data, &size, &tag, &rmh, nullptr, &rr), ncclSuccess);
  long long deadline = netNowNs() + 30000000000LL;
  while (sr == nullptr && netNowNs() < deadline)
    ASSERT_EQ(ib->isend(sc, src.data(), kBig, 1, smh, nullptr, &sr), ncclSuccess);
  ASSERT_NE(sr, nullptr);
  ncclResult_t res = ncclSuccess;
  int done = 0, got = -1;
  while (res == ncclSuccess && !done && netNowNs() < deadline) {
    res = ib->test(sr, &done, &got);
    int rdone = 0;
    if (rr) {
      if (ib->test(rr, &rdone, nullptr) != ncclSuccess || rdone) rr = nullptr;  // fails too (or never completes)
    }
  }
  EXPECT_NE(res, ncclSuccess) << "the send completed into an unregistered range";
  EXPECT_TRUE(LogCapture::contains("remote access error", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("not (or no longer) covered by its registration", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("198.18.0.", NCCL_LOG_WARN)) << LogCapture::all();
  size_t changed = 0;
  for (size_t i = 4096; i < kBig; i++) changed += dst[i] != 0x5a;
  EXPECT_EQ(changed, 0u) << "bytes written past the registered 4 KiB";
  ib->deregMr(sc, smh);
  ib->deregMr(rc, rmh);
  ib->closeSend(sc);
  ib->closeRecv(rc);
  ib->closeListen(lc);
  free(dst);
}

// A sender that reports more bytes than the receive posted (the sizes records of a
// multi-receive, tampered with between the two isends of the real sender): the receiver's
// test() refuses the sizes with a WARN naming the peer instead of handing them to NCCL.
TEST_F(IbP2pTest, SizesReportedBeyondThePostedReceiveAreRefused) {
  // the clear-to-send protocol's multi-receive is tampered with below (eager messages
  // end at a comm's first multi-receive, and the sizes it writes back are theirs)
  env.set("RAILNET_IB_EAGER_SIZE", "0");
  init();
  LogCapture cap;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_TRUE(pairInProcess(0, 1, handle, &lc, &sc, &rc));
  std::vector<char> a(1000), b(1000), x(1000), y(1000);
  void *mha = nullptr, *mhb = nullptr, *mhx = nullptr, *mhy = nullptr;
  ASSERT_EQ(ib->regMr(sc, a.data(), a.size(), NCCL_PTR_HOST, &mha), ncclSuccess);
  ASSERT_EQ(ib->regMr(sc, b.data(), b.size(), NCCL_PTR_HOST, &mhb), ncclSuccess);
  ASSERT_EQ(ib->regMr(rc, x.data(), x.size(), NCCL_PTR_HOST, &mhx), ncclSuccess);
  ASSERT_EQ(ib->regMr(rc, y.data(), y.size(), NCCL_PTR_HOST, &mhy), ncclSuccess);
  void* data[2] = {x.data(), y.data()};
  size_t sizes[2] = {500, 1000};
  int tags[2] = {1, 2};
  void* mhs[2] = {mhx, mhy};
  void *rr = nullptr, *s1 = nullptr, *s2 = nullptr;
  ASSERT_EQ(ib->irecv(rc, 2, data, sizes, tags, mhs, nullptr, &rr), ncclSuccess);
  long long deadline = netNowNs() + 30000000000LL;
  while (s1 == nullptr && netNowNs() < deadline)
    ASSERT_EQ(ib->isend(sc, a.data(), 400, 1, mha, nullptr, &s1), ncclSuccess);
  ASSERT_NE(s1, nullptr);
  // the first isend recorded 400 in the sizes the second one writes to the receiver
  struct ncclIbSendComm* comm = (struct ncclIbSendComm*)sc;
  int slot = (int)(comm->base.fifoHead % RAILNET_IB_FIFO_SLOTS);
  ASSERT_EQ(comm->sizes[slot][0], 400);
  comm->sizes[slot][0] = 1 << 30;
  ASSERT_EQ(ib->isend(sc, b.data(), 1000, 2, mhb, nullptr, &s2), ncclSuccess);
  ASSERT_NE(s2, nullptr);
  std::string err;
  ASSERT_TRUE(netWait(ib, s1, nullptr, deadline, &err)) << err;
  ASSERT_TRUE(netWait(ib, s2, nullptr, deadline, &err)) << err;
  ncclResult_t res = ncclSuccess;
  int done = 0, got[2] = {-1, -1};
  while (res == ncclSuccess && !done && netNowNs() < deadline) res = ib->test(rr, &done, got);
  EXPECT_EQ(res, ncclRemoteError);
  EXPECT_EQ(got[0], -1) << "sizes handed out despite the error";
  EXPECT_TRUE(LogCapture::contains("reported 1073741824 bytes written into receive buffer 0/2 of 500 bytes",
                                   NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("198.18.0.", NCCL_LOG_WARN)) << LogCapture::all();
  for (auto& p : std::vector<std::pair<void*, void*>>{{sc, mha}, {sc, mhb}, {rc, mhx}, {rc, mhy}})
    ib->deregMr(p.first, p.second);
  ib->closeSend(sc);
  ib->closeRecv(rc);
  ib->closeListen(lc);
}

// Connection metadata with the right magic but counts out of range, from a peer that
// passes the socket handshake: each is refused with a WARN naming the peer and what is out
// of range; the listener keeps serving.
TEST_F(IbP2pTest, MetadataWithOutOfRangeCountsIsRefused) {
  init();
  LogCapture cap;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
  struct ncclIbHandle h;
  memcpy(&h, handle, sizeof(h));
  struct Case {
    const char* what;
    std::function<void(struct ncclIbConnectionMetadata*)> spoil;
    const char* warn;
  };
  std::vector<Case> cases = {
      {"99 devices", [](struct ncclIbConnectionMetadata* m) { m->ndevs = 99; }, "99 devices"},
      {"500 QPs", [](struct ncclIbConnectionMetadata* m) { m->nqps = 500; }, "500 QPs"},
      {"negative QPs", [](struct ncclIbConnectionMetadata* m) { m->nqps = -3; }, "-3 QPs"},
      {"QP on device 7 of 1", [](struct ncclIbConnectionMetadata* m) { m->qpInfo[0].devIndex = 7; },
       "on device 7 of 1"},
      {"MTU 9", [](struct ncclIbConnectionMetadata* m) { m->devs[0].mtu = 9; }, "mtu 9"},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.what);
    LogCapture::lines().clear();
    struct ncclIbConnectionMetadata m;
    memset(&m, 0, sizeof(m));
    m.magic = RAILNET_IB_META_MAGIC;
    m.version = RAILNET_IB_META_VERSION;
    m.ndevs = 1;
    m.nqps = 1;
    m.fifoAddr = 0x10000;
    m.devs[0].linkLayer = IBV_LINK_LAYER_ETHERNET;
    m.devs[0].mtu = IBV_MTU_1024;
    m.devs[0].fifoRkey = 0x42;
    m.qpInfo[0].qpn = 0x99;
    c.spoil(&m);
    struct ncclSocket bad;
    ASSERT_EQ(ncclSocketInit(&bad, &h.connectAddr, h.socketMagic, ncclSocketTypeNetIb, nullptr, 0), ncclSuccess);
    ASSERT_EQ(ncclSocketConnect(&bad), ncclSuccess);
    ASSERT_EQ(ncclSocketSend(&bad, &m, (int)sizeof(m)), ncclSuccess);
    void* rc = nullptr;
    long long deadline = netNowNs() + 10000000000LL;
    while (!LogCapture::contains("refused the connection from") && netNowNs() < deadline) {
      ASSERT_EQ(ib->accept(lc, &rc, nullptr), ncclSuccess);
      ASSERT_EQ(rc, nullptr);
    }
    EXPECT_TRUE(LogCapture::contains("sent invalid", NCCL_LOG_WARN)) << LogCapture::all();
    EXPECT_TRUE(LogCapture::contains(c.warn, NCCL_LOG_WARN)) << LogCapture::all();
    ncclSocketClose(&bad);
  }
  // still serving
  void *sc = nullptr, *rc = nullptr;
  ASSERT_TRUE(netConnectPair(ib, ctx, 1, handle, lc, &sc, &rc));
  ib->closeSend(sc);
  ib->closeRecv(rc);
  ib->closeListen(lc);
}

// The other direction: a fake listener that answers a real connect() with metadata whose
// QP count differs from the connect's own: connect fails with a WARN naming the listener.
TEST_F(IbP2pTest, ListenerAnsweringWithBadMetadataFailsTheConnect) {
  init();
  LogCapture cap;
  struct ncclSocket ls;
  union ncclSocketAddress any;
  memset(&any, 0, sizeof(any));
  any.sin.sin_family = AF_INET;
  inet_pton(AF_INET, "198.18.0.1", &any.sin.sin_addr);
  const uint64_t magic = 0x5eed5eed12345678ULL;
  ASSERT_EQ(ncclSocketInit(&ls, &any, magic, ncclSocketTypeNetIb, nullptr, 1), ncclSuccess);
  ASSERT_EQ(ncclSocketListen(&ls), ncclSuccess);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(handle, 0, sizeof(handle));
  struct ncclIbHandle h;
  memset(&h, 0, sizeof(h));
  h.handleMagic = RAILNET_IB_HANDLE_MAGIC;
  h.connectAddr = ls.addr;
  h.socketMagic = magic;
  memcpy(handle, &h, sizeof(h));
  void* sc = nullptr;
  ASSERT_EQ(ib->connect(ctx, 1, handle, &sc, nullptr), ncclSuccess);
  struct ncclSocket peer;
  ASSERT_EQ(ncclSocketInit(&peer, nullptr, magic, ncclSocketTypeNetIb, nullptr, 1), ncclSuccess);
  ASSERT_EQ(ncclSocketAccept(&peer, &ls), ncclSuccess);
  ncclResult_t res = ncclSuccess;
  struct ncclIbConnectionMetadata theirs;
  int offset = 0, ready = 0;
  long long deadline = netNowNs() + 20000000000LL;
  while (!ready && netNowNs() < deadline) {
    ASSERT_EQ(ib->connect(ctx, 1, handle, &sc, nullptr), ncclSuccess);
    ASSERT_EQ(ncclSocketReady(&peer, &ready), ncclSuccess);
  }
  ASSERT_TRUE(ready);
  while (offset < (int)sizeof(theirs) && netNowNs() < deadline) {
    ASSERT_EQ(ib->connect(ctx, 1, handle, &sc, nullptr), ncclSuccess);
    int closed = 0;
    ASSERT_EQ(ncclSocketProgress(NCCL_SOCKET_RECV, &peer, &theirs, sizeof(theirs), &offset, &closed), ncclSuccess);
    ASSERT_FALSE(closed);
  }
  ASSERT_EQ(offset, (int)sizeof(theirs));
  ASSERT_EQ(theirs.magic, RAILNET_IB_META_MAGIC);
  struct ncclIbConnectionMetadata bad = theirs;
  bad.nqps = theirs.nqps + 1;  // not what the connect side created
  bad.qpInfo[theirs.nqps] = theirs.qpInfo[0];
  ASSERT_EQ(ncclSocketSend(&peer, &bad, (int)sizeof(bad)), ncclSuccess);
  while (res == ncclSuccess && sc == nullptr && netNowNs() < deadline) res = ib->connect(ctx, 1, handle, &sc, nullptr);
  EXPECT_EQ(res, ncclRemoteError);
  EXPECT_EQ(sc, nullptr);
  EXPECT_TRUE(LogCapture::contains("sent invalid connection metadata", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("as many as ours", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("198.18.0.1", NCCL_LOG_WARN)) << LogCapture::all();
  ncclSocketClose(&peer);
  ncclSocketClose(&ls);
}

// ------------------------------------------------------------------ QP settings, fused devices

// NCCL_IB_SL, NCCL_IB_TC, NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT and NCCL_IB_PKEY end up in the
// queue pairs of both ends (read back with ibv_query_qp; the SL on InfiniBand only), and the
// comm moves data with them; without NCCL_IB_TC the comm config's trafficClass is used (and
// never as the service level). NCCL_IB_PKEY reaches the QPs (a NIC that checks the index
// refuses one beyond its table, with a WARN naming the variable; rxe does not check).
TEST_F(IbP2pTest, QpAttributesCarryTheIbEnvironment) {
  env.set("NCCL_IB_SL", "3");
  env.set("NCCL_IB_TC", "106");
  env.set("NCCL_IB_TIMEOUT", "16");
  env.set("NCCL_IB_RETRY_CNT", "5");
  init();
  LogCapture cap;
  auto check = [&](void* comm, int tc, int sl, const char* side) {
    struct ncclIbNetCommBase* base = (struct ncclIbNetCommBase*)comm;
    ASSERT_GE(base->nqps, 1);
    for (int q = 0; q < base->nqps; q++) {
      struct ibv_qp_attr attr;
      struct ibv_qp_init_attr init;
      memset(&attr, 0, sizeof(attr));
      ASSERT_EQ(wrap_ibv_query_qp(base->qps[q].qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_PKEY_INDEX, &init), ncclSuccess);
      EXPECT_EQ(attr.qp_state, IBV_QPS_RTS) << side << " QP " << q;
      // RoCE packets carry no service level (rxe keeps none): NCCL_IB_SL shows on InfiniBand only
      if (ncclIbDevs[base->devs[base->qps[q].devIndex].ibDevN].link == IBV_LINK_LAYER_INFINIBAND) {
        EXPECT_EQ(attr.ah_attr.sl, sl) << side << " QP " << q;
      }
      EXPECT_EQ(attr.ah_attr.grh.traffic_class, tc) << side << " QP " << q;
      EXPECT_EQ(attr.pkey_index, 0) << side << " QP " << q;
      if (base->isSend) {  // the responder side of the sender's QPs is idle: check the requester's timers
        EXPECT_EQ(attr.timeout, 16) << side << " QP " << q;
        EXPECT_EQ(attr.retry_cnt, 5) << side << " QP " << q;
      }
    }
  };
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_TRUE(pairInProcess(0, 1, handle, &lc, &sc, &rc));
  check(sc, 106, 3, "sender");
  check(rc, 106, 3, "receiver");
  EXPECT_EQ(moveInProcess(sc, rc, {1, 4096, 100003}, 5), "") << LogCapture::all();
  ib->closeSend(sc);
  ib->closeRecv(rc);
  // the comm config's traffic class when NCCL_IB_TC is not set (ncclNet v10+ per-comm config)
  env.unset("NCCL_IB_TC");
  env.unset("NCCL_IB_SL");
  ncclNetCommConfig_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.trafficClass = 96;
  void* cctx = nullptr;
  ASSERT_EQ(ib->init(&cctx, 0, &cfg, nullptr, nullptr), ncclSuccess);
  sc = rc = nullptr;
  ASSERT_TRUE(netConnectPair(ib, cctx, 1, handle, lc, &sc, &rc));
  check(sc, 96, 0, "sender (config)");  // a traffic class, not a service level
  check(rc, 96, 0, "receiver (config)");
  EXPECT_EQ(moveInProcess(sc, rc, {77777}, 9), "") << LogCapture::all();
  ib->closeSend(sc);
  ib->closeRecv(rc);
  ib->finalize(cctx);
  // a partition key index beyond the port's table: a NIC that checks it fails the connection
  // with a WARN naming NCCL_IB_PKEY; soft-RoCE does not check, and the QPs show the index
  struct ibv_port_attr pa;
  ASSERT_EQ(wrap_ibv_query_port(ncclIbDevs[1].context, ncclIbDevs[1].portNum, &pa), ncclSuccess);
  int pkey = (int)pa.pkey_tbl_len;
  env.set("NCCL_IB_PKEY", std::to_string(pkey).c_str());
  sc = rc = nullptr;
  ncclResult_t r = ncclSuccess, ra = ncclSuccess;
  long long deadline = netNowNs() + 20000000000LL;
  while (r == ncclSuccess && ra == ncclSuccess && (sc == nullptr || rc == nullptr) && netNowNs() < deadline) {
    if (sc == nullptr) r = ib->connect(ctx, 1, handle, &sc, nullptr);
    if (rc == nullptr) ra = ib->accept(lc, &rc, nullptr);
  }
  if (r != ncclSuccess || ra != ncclSuccess) {
    EXPECT_TRUE(LogCapture::contains("RESET->INIT failed (NCCL_IB_PKEY=" + std::to_string(pkey) + ")", NCCL_LOG_WARN))
        << LogCapture::all();
    printf("NCCL_IB_PKEY=%d (the port has %d entries): connection refused with the WARN\n", pkey, pkey);
  } else {
    ASSERT_NE(sc, nullptr);
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    memset(&attr, 0, sizeof(attr));
    ASSERT_EQ(wrap_ibv_query_qp(((struct ncclIbNetCommBase*)sc)->qps[0].qp, &attr, IBV_QP_PKEY_INDEX, &init),
              ncclSuccess);
    EXPECT_EQ(attr.pkey_index, pkey);
    printf("NCCL_IB_PKEY=%d (the port has %d entries): accepted by this device, the QP shows index %d\n", pkey,
           pkey, attr.pkey_index);
  }
  if (sc) ib->closeSend(sc);
  if (rc) ib->closeRecv(rc);
  ib->closeListen(lc);
}

// A fused device (makeVDevice of rxe0+rxe1) on both ends: one QP per physical device, data
// split across them, clear-to-send entries carrying an rkey per device; every message
// arrives intact and both devices carried packets.
// NCCL's handles are byte arrays of any alignment (railnet-diag --pair carries one inside a
// packed record): listen writes, and connect reads, a handle at an odd address without
// touching it as a struct in place (UBSan in the sanitize tier flags a misaligned access).
TEST_F(IbP2pTest, HandleAtAnOddAddress) {
  init();
  alignas(8) char buf[NCCL_NET_HANDLE_MAXSIZE + 8];
  char* handle = buf + 3;
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_TRUE(pairInProcess(1, 0, handle, &lc, &sc, &rc));
  EXPECT_EQ(moveInProcess(sc, rc, {1, 4095, 65536 + 3}, 5), "");
  ib->closeSend(sc);
  ib->closeRecv(rc);
  ib->closeListen(lc);
}

TEST_F(IbP2pTest, FusedDeviceMovesDataOverBothDevices) {
  env.set("NCCL_IB_SPLIT_DATA_ON_QPS", "1");
  init();
  LogCapture cap;
  int d = -1;
  ASSERT_EQ(ibFuseFirstTwoDevices(&d), ncclSuccess);
  auto sent = [](const char* dev) {
    std::string p = std::string("/sys/class/infiniband/") + dev + "/ports/1/hw_counters/sent_pkts";
    FILE* f = fopen(p.c_str(), "r");
    long long v = -1;
    if (f) {
      if (fscanf(f, "%lld", &v) != 1) v = -1;
      fclose(f);
    }
    return v;
  };
  long long s0 = sent("rxe0"), s1 = sent("rxe1");
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_TRUE(pairInProcess(d, d, handle, &lc, &sc, &rc)) << LogCapture::all();
  struct ncclIbNetCommBase* base = (struct ncclIbNetCommBase*)sc;
  EXPECT_EQ(base->vProps.ndevs, 2);
  ASSERT_EQ(base->nqps, 2);
  EXPECT_NE(base->qps[0].devIndex, base->qps[1].devIndex);
  EXPECT_EQ(moveInProcess(sc, rc, {0, 1, 4095, 65536 + 3, 1 << 20}, 21), "") << LogCapture::all();
  // soft-RoCE counts the packets each device sent (hw_counters); other NICs may not
  bool rxe = std::string(ncclIbDevs[0].devName).rfind("rxe", 0) == 0;
  if (rxe || (s0 >= 0 && s1 >= 0)) {
    EXPECT_GT(sent("rxe0"), s0) << "rxe0 sent no packets";
    EXPECT_GT(sent("rxe1"), s1) << "rxe1 sent no packets";
  } else {
    printf("NOTE: no sent_pkts counters on these devices: which device carried the data is not checked\n");
  }
  ib->closeSend(sc);
  ib->closeRecv(rc);
  ib->closeListen(lc);
}

// GPUDirect flush (iflush) on real soft-RoCE: with a peer-memory module present (a sysfs
// tree whose class/, devices/ and bus/ are the real ones, plus module/nvidia_peermem), the
// receive comm gets a QP connected to itself per device, and iflush after a receive posts
// an RDMA read of the received buffer through it that test() completes. NCCL_GDR_FLUSH_DISABLE=1
// turns it off: no flush QP, iflush hands back no request.
TEST_F(IbP2pTest, GpuDirectFlushReadsThroughTheLoopbackQp) {
  TempDir sys;
  for (const char* d : {"class", "devices", "bus"})
    ASSERT_EQ(symlink((std::string("/sys/") + d).c_str(), (sys.path() + "/" + d).c_str()), 0);
  sys.write("module/nvidia_peermem/version", "1.0\n");
  env.set("SYSFS_PATH", sys.path().c_str());
  railnetIbGdrReset();
  init();
  LogCapture cap;
  ASSERT_EQ(ncclIbGdrSupport(), ncclSuccess) << LogCapture::all();
  for (int disable = 0; disable <= 1; disable++) {
    SCOPED_TRACE(disable ? "NCCL_GDR_FLUSH_DISABLE=1" : "flush enabled");
    env.set("NCCL_GDR_FLUSH_DISABLE", disable ? "1" : "0");
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = nullptr, *sc = nullptr, *rc = nullptr;
    ASSERT_TRUE(pairInProcess(0, 1, handle, &lc, &sc, &rc)) << LogCapture::all();
    struct ncclIbRecvComm* r = (struct ncclIbRecvComm*)rc;
    EXPECT_EQ(r->flushEnabled, !disable);
    EXPECT_EQ(r->base.devs[0].flushQp != nullptr, !disable);
    EXPECT_EQ(moveInProcess(sc, rc, {4096}, 31), "") << LogCapture::all();
    std::vector<char> buf(4096, 7);
    void* mh = nullptr;
    ASSERT_EQ(ib->regMr(rc, buf.data(), buf.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
    void* data = buf.data();
    int size = 4096;
    void* req = nullptr;
    ASSERT_EQ(ib->iflush(rc, 1, &data, &size, &mh, &req), ncclSuccess) << LogCapture::all();
    if (disable) {
      EXPECT_EQ(req, nullptr);
    } else {
      ASSERT_NE(req, nullptr);
      std::string err;
      EXPECT_TRUE(netWait(ib, req, nullptr, netNowNs() + 20000000000LL, &err)) << err << LogCapture::all();
      EXPECT_EQ(r->flushBuf[0] & 0xff, 7) << "the flush read did not bring the buffer's first byte";
    }
    ib->deregMr(rc, mh);
    ib->closeSend(sc);
    ib->closeRecv(rc);
    ib->closeListen(lc);
  }
  env.unset("SYSFS_PATH");
  railnetIbGdrReset();
}

}  // namespace
