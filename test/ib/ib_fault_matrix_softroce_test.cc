// The fault matrix on real soft-RoCE (the tier's VM: rxe0 on veth0 198.18.0.1, rxe1 on
// veth1 198.18.0.2, the two ends of one veth pair). Each case ends either in correct data
// or in an error returned within a bounded time with a WARN that names the cause, and
// prints one FAULT-MATRIX row (transport, case, outcome, time from the fault to the
// outcome). Cases: a peer killed during the handshake and during close, the link going
// down and coming back, the link going down for good, the listen port flooded with 1,000
// garbage connections during a transfer, and netem delay and reordering on the veth pair
// for both transports (netem exists in the VM's Debian kernel, not on the host).
// The killed-mid-transfer cases live in ib_faults_softroce_test.cc. Skips without two
// RDMA devices; the link and netem cases also need root and the veth pair.
#include "test_util.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include "net_pair.h"

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "railnet.h"
#include "net_socket.h"
#include "socket.h"
#include "../../src/transport/net_ib/wire.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}
#include "ib_test_env.h"

namespace {

const ncclNet_t* ib = &railnetNetIb;

std::string shOut(const std::string& cmd) {
  std::string out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) return "popen failed";
  char b[512];
  while (fgets(b, sizeof(b), f)) out += b;
  int st = pclose(f);
  if (st != 0) out += "[exit " + std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : -1) + "]";
  return out;
}

// The veth pair of the tier's VM, or why a case cannot change it.
std::string vethOrWhy() {
  if (geteuid() != 0) return "needs root to change the veth pair";
  if (!shQuiet("ip link show veth0") || !shQuiet("ip link show veth1"))
    return "no veth0/veth1 (the soft-RoCE VM creates them)";
  return "";
}

// Both rxe ports active again (after a link change), within 20 s.
bool waitPortsActive() {
  for (int i = 0; i < 200; i++) {
    if (ibPortActive("rxe0") && ibPortActive("rxe1")) return true;
    usleep(100000);
  }
  return false;
}

// Buffers of one comm pair, registered once.
struct Pipe {
  const ncclNet_t* net;
  void *sc = nullptr, *rc = nullptr;
  std::vector<char> src, dst;
  void *smh = nullptr, *rmh = nullptr;
  Pipe(const ncclNet_t* n, void* s, void* r, size_t size) : net(n), sc(s), rc(r), src(size), dst(size) {}
  bool reg() {
    return net->regMr(sc, src.data(), src.size(), NCCL_PTR_HOST, &smh) == ncclSuccess &&
           net->regMr(rc, dst.data(), dst.size(), NCCL_PTR_HOST, &rmh) == ncclSuccess;
  }
  void close() {
    if (smh) net->deregMr(sc, smh);
    if (rmh) net->deregMr(rc, rmh);
    if (sc) net->closeSend(sc);
    if (rc) net->closeRecv(rc);
    smh = rmh = sc = rc = nullptr;
  }
};

// Moves `count` messages of the pipe's size from sc to rc (this process drives both ends:
// receive posted first, then the send), message k with pattern seed+k; before(k) runs
// before message k. "" on success, else what failed.
std::string pump(Pipe& p, int count, int seed, long long deadline, const std::function<void(int)>& before = nullptr) {
  for (int k = 0; k < count; k++) {
    if (before) before(k);
    netPatternFill(p.src.data(), p.src.size(), seed + k);
    memset(p.dst.data(), 0, p.dst.size());
    void* data = p.dst.data();
    size_t size = p.dst.size();
    int tag = k;
    void *rr = nullptr, *sr = nullptr;
    ncclResult_t r = p.net->irecv(p.rc, 1, &data, &size, &tag, &p.rmh, nullptr, &rr);
    if (r != ncclSuccess || rr == nullptr) return "irecv of message " + std::to_string(k) + " returned " + std::to_string(r);
    bool rdone = false;
    while (sr == nullptr) {
      r = p.net->isend(p.sc, p.src.data(), p.src.size(), k, p.smh, nullptr, &sr);
      if (r != ncclSuccess) return "isend of message " + std::to_string(k) + " returned " + std::to_string(r);
      if (netNowNs() > deadline) return "no clear-to-send for message " + std::to_string(k);
      // as NCCL does: the receive is tested meanwhile (its clear-to-send may have failed)
      int done = 0;
      if (sr == nullptr && (r = p.net->test(rr, &done, nullptr)) != ncclSuccess)
        return "receive test of message " + std::to_string(k) + " returned " + std::to_string(r);
      if (done) return "receive of message " + std::to_string(k) + " completed before its send was posted";
    }
    std::string err;
    int s1 = -1, s2 = -1;
    // both requests progress together: a send completes only once the receive is posted
    bool sdone = false;
    while (!(sdone && rdone)) {
      int done = 0;
      if (!sdone) {
        if ((r = p.net->test(sr, &done, &s1)) != ncclSuccess) return "send test of message " + std::to_string(k) + " returned " + std::to_string(r);
        sdone = done;
      }
      if (!rdone) {
        if ((r = p.net->test(rr, &done, &s2)) != ncclSuccess) return "receive test of message " + std::to_string(k) + " returned " + std::to_string(r);
        rdone = done;
      }
      if (netNowNs() > deadline) return "message " + std::to_string(k) + " still pending at the deadline";
    }
    if (s2 != (int)p.dst.size()) return "message " + std::to_string(k) + ": receive reported " + std::to_string(s2);
    size_t bad = 0;
    if (!netPatternCheck(p.dst.data(), p.dst.size(), seed + k, &bad))
      return "message " + std::to_string(k) + ": wrong byte at " + std::to_string(bad);
  }
  return "";
}

// isends on sc (each tested to its end) until one fails or deadline passes: what failed.
ncclResult_t sendUntilFailure(void* sc, void* data, size_t size, void* mh, long long deadline) {
  void* sr = nullptr;
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && netNowNs() < deadline) {
    int done = 0;
    if (sr == nullptr) r = ib->isend(sc, data, size, 7, mh, nullptr, &sr);
    else if ((r = ib->test(sr, &done, nullptr)) == ncclSuccess && done) sr = nullptr;
  }
  return r;
}

std::string firstWarn() {
  for (auto& l : LogCapture::lines())
    if (l.level == NCCL_LOG_WARN) return l.msg;
  return "";
}

// Kills and reaps a forked child when the test leaves early (a failed ASSERT), so that no
// child holding queue pairs outlives its test.
struct ChildGuard {
  pid_t pid = -1;
  ~ChildGuard() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  // SIGKILL now; true when it was the child's end
  bool killNow() {
    if (pid <= 0) return false;
    kill(pid, SIGKILL);
    int st = 0;
    bool ok = waitpid(pid, &st, 0) == pid && WIFSIGNALED(st);
    pid = -1;
    return ok;
  }
};

class IbFaultMatrix : public IbTwoDevicesTest {
 protected:
  void init() { ASSERT_EQ(ib->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess); }
  // A connected pair rxe1 -> rxe0 in this process, with its buffers registered.
  std::unique_ptr<Pipe> pair(size_t size, void** lcOut = nullptr) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = nullptr, *sc = nullptr, *rc = nullptr;
    if (ib->listen(ctx, 0, handle, &lc) != ncclSuccess) return nullptr;
    bool ok = netConnectPair(ib, ctx, 1, handle, lc, &sc, &rc, 60000);
    if (lcOut) *lcOut = lc;
    else ib->closeListen(lc);
    if (!ok) return nullptr;
    std::unique_ptr<Pipe> p(new Pipe(ib, sc, rc, size));
    if (!p->reg()) {
      p->close();
      return nullptr;
    }
    return p;
  }
};

// A sender process dies after sending its connection metadata, before the receiver has
// answered. The receiver's accept gets the dead peer's metadata, answers into a closed
// socket and drops the half-made connection with a WARN naming the peer; the next
// connection on the same listener moves correct data.
TEST_F(IbFaultMatrix, PeerKilledDuringHandshake) {
  init();
  LogCapture cap;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
  int sp[2];
  ASSERT_EQ(pipe(sp), 0);
  ChildGuard child;
  child.pid = fork();
  ASSERT_GE(child.pid, 0);
  if (child.pid == 0) {
    railnetSetLogger(nullptr);
    railnetIbResetDevices();
    void *cctx = nullptr, *sc = nullptr;
    if (ib->init(&cctx, 0, nullptr, nullptr, nullptr) != ncclSuccess) _exit(3);
    long long until = netNowNs() + 2000000000LL;  // the accept side is not served: connect cannot finish
    while (netNowNs() < until)
      if (ib->connect(cctx, 1, handle, &sc, nullptr) != ncclSuccess || sc != nullptr) _exit(4);
    if (write(sp[1], "H", 1) != 1) _exit(5);
    for (;;) pause();
  }
  close(sp[1]);
  struct pollfd pf = {sp[0], POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, 60000), 1);
  char c = 0;
  ASSERT_EQ(read(sp[0], &c, 1), 1);
  close(sp[0]);
  ASSERT_TRUE(child.killNow()) << "the half-connecting child had exited before the kill";
  long long t0 = netNowNs(), deadline = t0 + 30000000000LL;
  void* rc = nullptr;
  while (!LogCapture::contains("refused it", NCCL_LOG_WARN) && rc == nullptr && netNowNs() < deadline)
    ASSERT_EQ(ib->accept(lc, &rc, nullptr), ncclSuccess) << LogCapture::all();
  double secs = (netNowNs() - t0) / 1e9;
  ASSERT_EQ(rc, nullptr) << "a comm with a dead peer was returned";
  ASSERT_TRUE(LogCapture::contains("refused it", NCCL_LOG_WARN)) << "no WARN about the dead peer within 30 s\n"
                                                                 << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("peer 198.18.0.", NCCL_LOG_WARN)) << LogCapture::all();
  printf("accept dropped the dead peer after %.1f s: %s\n", secs, firstWarn().c_str());
  // the listener still serves a real connection
  void *sc = nullptr, *rc2 = nullptr;
  ASSERT_TRUE(netConnectPair(ib, ctx, 1, handle, lc, &sc, &rc2, 60000)) << LogCapture::all();
  Pipe p(ib, sc, rc2, 100000);
  ASSERT_TRUE(p.reg());
  std::string err = pump(p, 3, 40, netNowNs() + 60000000000LL);
  EXPECT_EQ(err, "") << LogCapture::all();
  p.close();
  ib->closeListen(lc);
  faultMatrixRow("ib", "peer killed during handshake", "accept drops it, WARN names the peer; next conn correct",
                 secs);
}

// The sender process sends its messages and is killed instead of closing: the receiver has
// all its data, and closing its comm and listener returns at once.
TEST_F(IbFaultMatrix, PeerKilledDuringClose) {
  init();
  const size_t kSize = 300000;
  const int kCount = 4;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
  int sp[2];
  ASSERT_EQ(pipe(sp), 0);
  ChildGuard child;
  child.pid = fork();
  ASSERT_GE(child.pid, 0);
  if (child.pid == 0) {
    railnetSetLogger(nullptr);
    railnetIbResetDevices();
    void* cctx = nullptr;
    if (ib->init(&cctx, 0, nullptr, nullptr, nullptr) != ncclSuccess) _exit(3);
    // netRunSender would close the comm: connect and send by hand, then stop short of closing
    void* sc = nullptr;
    long long deadline = netNowNs() + 60000000000LL;
    while (sc == nullptr)
      if (ib->connect(cctx, 1, handle, &sc, nullptr) != ncclSuccess || netNowNs() > deadline) _exit(4);
    std::vector<char> buf(kSize);
    void* mh = nullptr;
    if (ib->regMr(sc, buf.data(), kSize, NCCL_PTR_HOST, &mh) != ncclSuccess) _exit(5);
    for (int k = 0; k < kCount; k++) {
      netPatternFill(buf.data(), kSize, 70 + k);
      void* req = nullptr;
      while (req == nullptr)
        if (ib->isend(sc, buf.data(), kSize, k, mh, nullptr, &req) != ncclSuccess || netNowNs() > deadline) _exit(6);
      int size = -1;
      std::string err;
      if (!netWait(ib, req, &size, deadline, &err)) _exit(7);
    }
    if (write(sp[1], "S", 1) != 1) _exit(8);
    for (;;) pause();
  }
  close(sp[1]);
  void* rc = nullptr;
  long long deadline = netNowNs() + 60000000000LL;
  while (rc == nullptr && netNowNs() < deadline) ASSERT_EQ(ib->accept(lc, &rc, nullptr), ncclSuccess);
  ASSERT_NE(rc, nullptr);
  std::vector<char> dst(kSize);
  void* mh = nullptr;
  ASSERT_EQ(ib->regMr(rc, dst.data(), kSize, NCCL_PTR_HOST, &mh), ncclSuccess);
  for (int k = 0; k < kCount; k++) {
    void* data = dst.data();
    size_t size = kSize;
    int tag = k, got = -1;
    void* req = nullptr;
    ASSERT_EQ(ib->irecv(rc, 1, &data, &size, &tag, &mh, nullptr, &req), ncclSuccess);
    std::string err;
    ASSERT_TRUE(netWait(ib, req, &got, deadline, &err)) << err;
    EXPECT_EQ(got, (int)kSize);
    EXPECT_TRUE(netPatternCheck(dst.data(), kSize, 70 + k, nullptr)) << "message " << k;
  }
  struct pollfd pf = {sp[0], POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, 60000), 1);
  close(sp[0]);
  // one more receive posted to the sender that is about to die, then the kill and the close
  void* data = dst.data();
  size_t size = kSize;
  int tag = kCount;
  void* pending = nullptr;
  ASSERT_EQ(ib->irecv(rc, 1, &data, &size, &tag, &mh, nullptr, &pending), ncclSuccess);
  EXPECT_TRUE(child.killNow());
  long long t0 = netNowNs();
  EXPECT_EQ(ib->deregMr(rc, mh), ncclSuccess);
  EXPECT_EQ(ib->closeRecv(rc), ncclSuccess);
  EXPECT_EQ(ib->closeListen(lc), ncclSuccess);
  double secs = (netNowNs() - t0) / 1e9;
  EXPECT_LT(secs, 10.0) << "closing after the peer died took too long";
  faultMatrixRow("ib", "peer killed during close", "correct data; close with a receive posted returns", secs);
}

// The link (veth0 under rxe0) goes down for 1 s in the middle of a stream and comes back.
// With NCCL_IB_TIMEOUT=18 (1.07 s) x NCCL_IB_RETRY_CNT=7 a NIC that keeps its queue pairs
// would retransmit across the outage (correct data); soft-RoCE fails every posted request
// at once with "local QP operation error" instead. Either way: correct data, or an error
// within the bound with a WARN that names the port as down; and a comm made after the link
// is back works. At NCCL's defaults too (20 / 7: a NIC would retransmit 4.3 s after the
// outage began).
class IbLinkFlap : public IbFaultMatrix, public ::testing::WithParamInterface<bool> {};

TEST_P(IbLinkFlap, LinkDownOneSecondThenUpAgain) {
  std::string why = vethOrWhy();
  if (!why.empty()) RAILNET_SKIP(why);
  bool atDefaults = GetParam();
  env.set("NCCL_IB_TIMEOUT", atDefaults ? nullptr : "18");
  env.set("NCCL_IB_RETRY_CNT", atDefaults ? nullptr : "7");
  init();
  LogCapture cap;
  std::unique_ptr<Pipe> p = pair(1 << 20);
  ASSERT_TRUE(p) << LogCapture::all();
  std::thread upper;
  long long downAt = 0;
  std::string err = pump(*p, 6, 10, netNowNs() + 40000000000LL, [&](int k) {
    if (k != 2) return;
    ASSERT_TRUE(shQuiet("ip link set veth0 down"));
    downAt = netNowNs();
    upper = std::thread([] {
      sleep(1);
      softroceLinkUp("veth0");
    });
  });
  double secs = (netNowNs() - downAt) / 1e9;
  if (upper.joinable()) upper.join();
  ASSERT_TRUE(waitPortsActive()) << "rxe ports not active again after the link came back";
  std::string outcome;
  if (err.empty()) {
    outcome = "correct data (retransmitted after the link came back)";
  } else {
    EXPECT_TRUE(LogCapture::contains("HINT", NCCL_LOG_WARN) ||
                LogCapture::contains("its port is DOWN now (its link went down); the comm fails", NCCL_LOG_WARN))
        << err << "\n" << LogCapture::all();
    EXPECT_TRUE(LogCapture::contains("its link went down", NCCL_LOG_WARN)) << err << "\n" << LogCapture::all();
    EXPECT_LT(secs, 30.0) << err;
    outcome = "test() fails at once, WARN: port down";
  }
  printf("link down 1 s: %s after %.1f s%s%s\n", outcome.c_str(), secs, err.empty() ? "" : ": ", err.c_str());
  p->close();
  // a new comm after the link is back moves correct data
  std::unique_ptr<Pipe> q = pair(1 << 20);
  ASSERT_TRUE(q) << LogCapture::all();
  EXPECT_EQ(pump(*q, 2, 20, netNowNs() + 60000000000LL), "") << LogCapture::all();
  q->close();
  faultMatrixRow("ib", atDefaults ? "link down 1 s, then up again (defaults)" : "link down 1 s, then up again",
                 outcome + "; new comm correct", secs);
}
INSTANTIATE_TEST_SUITE_P(Timeouts, IbLinkFlap, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "NcclDefaults" : "Short"; });

// The link goes down and stays down: with a short retry budget (NCCL_IB_TIMEOUT=16,
// NCCL_IB_RETRY_CNT=4: 1.3 s; not shorter, or the emulated soft-RoCE of a loaded host may
// run a healthy QP out of retries before the fault) the transfer fails within the bound (soft-RoCE: at once, "local QP
// operation error"; a hardware NIC: "transport retry counter exceeded"), test() returns an
// error and the WARN names the peer, the status and the port that is down.
// At NCCL's defaults too (soft-RoCE fails the posted requests at once; a NIC that keeps
// retrying for 34 s is failed by railnet when its port is still down after that time).
class IbLinkDownForGood : public IbFaultMatrix, public ::testing::WithParamInterface<bool> {};

TEST_P(IbLinkDownForGood, FailsBoundedWithThePeerAndPort) {
  std::string why = vethOrWhy();
  if (!why.empty()) RAILNET_SKIP(why);
  bool atDefaults = GetParam();
  env.set("NCCL_IB_TIMEOUT", atDefaults ? nullptr : "16");
  env.set("NCCL_IB_RETRY_CNT", atDefaults ? nullptr : "4");
  init();
  LogCapture cap;
  std::unique_ptr<Pipe> p = pair(1 << 20);
  ASSERT_TRUE(p) << LogCapture::all();
  long long downAt = 0;
  std::string err = pump(*p, 4, 30, netNowNs() + 30000000000LL, [&](int k) {
    if (k != 1) return;
    ASSERT_TRUE(shQuiet("ip link set veth0 down"));
    downAt = netNowNs();
  });
  ASSERT_NE(downAt, 0) << "the transfer ended before the link went down: " << err << LogCapture::all();
  double secs = (netNowNs() - downAt) / 1e9;
  EXPECT_EQ(softroceLinkUp("veth0"), 0);
  EXPECT_NE(err, "") << "the transfer completed across a link that was down";
  EXPECT_LT(secs, atDefaults ? 45.0 : 20.0) << err;
  EXPECT_TRUE(LogCapture::contains("retry counter exceeded", NCCL_LOG_WARN) ||
              LogCapture::contains("local QP operation error", NCCL_LOG_WARN) ||
              LogCapture::contains("longer than the QPs' retry time", NCCL_LOG_WARN) ||
              LogCapture::contains("its port is DOWN now (its link went down); the comm fails", NCCL_LOG_WARN))
      << err << "\n" << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("is DOWN now (its link went down)", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("198.18.0.", NCCL_LOG_WARN)) << LogCapture::all();
  printf("link down for good%s: %s after %.1f s\n", atDefaults ? " (NCCL's default timeouts)" : "", err.c_str(), secs);
  p->close();
  EXPECT_TRUE(waitPortsActive());
  faultMatrixRow("ib", atDefaults ? "link down for good, default timeouts" : "link down for good",
                 "test() fails: status, peer and port DOWN in the WARN", secs);
}

INSTANTIATE_TEST_SUITE_P(Timeouts, IbLinkDownForGood, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "NcclDefaults" : "Short"; });

// A receive waits with nothing in flight (NCCL's default timeouts, failover off, its
// default) when the receiver's link (veth0 under rxe0) goes down: the port's DOWN fails the
// receiver's comm at once, not after the QPs' retry time (34 s), with the WARN naming the
// port, the peer and the fix; the sender's next isend or test fails too (the receiver's
// comm closed its side of the socket).
TEST_F(IbFaultMatrix, PortDownFailsTheWaitingReceiverAtOnce) {
  std::string why = vethOrWhy();
  if (!why.empty()) RAILNET_SKIP(why);
  init();
  LogCapture cap;
  std::unique_ptr<Pipe> p = pair(1 << 20);
  ASSERT_TRUE(p) << LogCapture::all();
  ASSERT_EQ(pump(*p, 2, 50, netNowNs() + 60000000000LL), "") << LogCapture::all();
  void* data = p->dst.data();
  size_t size = p->dst.size();
  int tag = 7, done = 0;
  void* rr = nullptr;
  ASSERT_EQ(ib->irecv(p->rc, 1, &data, &size, &tag, &p->rmh, nullptr, &rr), ncclSuccess);
  ASSERT_NE(rr, nullptr);
  ASSERT_EQ(ib->test(rr, &done, nullptr), ncclSuccess);
  ASSERT_TRUE(shQuiet("ip link set veth0 down"));
  long long downAt = netNowNs(), deadline = downAt + 60000000000LL;
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && !done && netNowNs() < deadline) r = ib->test(rr, &done, nullptr);
  double secs = (netNowNs() - downAt) / 1e9;
  EXPECT_EQ(softroceLinkUp("veth0"), 0);
  EXPECT_EQ(done, 0) << "a receive completed with no send posted";
  EXPECT_EQ(r, ncclRemoteError) << "the receiver's test() did not fail within 60 s\n" << LogCapture::all();
  // NCCL's defaults: 4.096 us x 2^20 x (7+1) = 34.4 s of retries
  EXPECT_LT(secs, 4.096e-6 * (1 << 20) * 8 / 2) << "the comm failed after the QPs' retry time, not at the port event";
  EXPECT_TRUE(LogCapture::contains("its port is DOWN now (its link went down); the comm fails", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("of the receive comm with 198.18.0.", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("NCCL_IB_RESILIENCY_PORT_FAILOVER=1", NCCL_LOG_WARN)) << LogCapture::all();
  // the sender: an isend, or the test of one, fails (the clear-to-send written before the
  // fault may still take one message into the receive buffer; no other comes)
  EXPECT_NE(sendUntilFailure(p->sc, p->src.data(), p->src.size(), p->smh, netNowNs() + 60000000000LL), ncclSuccess)
      << "the sender did not notice the receiver's failed comm\n" << LogCapture::all();
  printf("port DOWN under a waiting receive: the receiver failed %.3f s after the link went down\n", secs);
  p->close();
  EXPECT_TRUE(waitPortsActive());
  faultMatrixRow("ib", "port DOWN under a waiting receive, defaults, failover=0",
                 "receiver's test() fails at once: port DOWN and the fix in the WARN", secs);
}

// The peer host "powers off" under an idle comm: every packet between the two addresses
// (the comm's TCP connection and RoCE) is dropped from then on, nothing closes, and nothing
// is in flight on the QPs. The sender waits in isend() for a clear-to-send, the receiver in
// test() of a receive whose clear-to-send write is lost (the QPs retry it: 34 s at NCCL's
// defaults, for ever on soft-RoCE). The comm socket's keepalive and TCP_USER_TIMEOUT
// (RAILNET_SOCKET_TIMEOUT_MSEC; 4 s here, 10 min by default) end the connection, and both
// sides fail with the WARN that says the host stopped answering.
TEST_F(IbFaultMatrix, PeerHostSilentUnderAnIdleComm) {
  std::string why = vethOrWhy();
  if (!why.empty()) RAILNET_SKIP(why);
  if (!shQuiet("nft list tables")) RAILNET_SKIP("no nft (nftables) in this environment");
  env.set("RAILNET_SOCKET_TIMEOUT_MSEC", "4000");
  init();
  LogCapture cap;
  std::unique_ptr<Pipe> p = pair(1 << 20);
  ASSERT_TRUE(p) << LogCapture::all();
  ASSERT_EQ(pump(*p, 2, 60, netNowNs() + 60000000000LL), "") << LogCapture::all();
  const char* drop =
      "nft add table ip railnet_silent && "
      "nft 'add chain ip railnet_silent out { type filter hook output priority 0; }' && "
      "nft add rule ip railnet_silent out ip saddr 198.18.0.0/24 ip daddr 198.18.0.0/24 drop";
  ASSERT_TRUE(shQuiet(drop)) << drop;
  long long silentAt = netNowNs(), deadline = silentAt + 60000000000LL;
  void* data = p->dst.data();
  size_t size = p->dst.size();
  int tag = 7, rdone = 0;
  void *rr = nullptr, *sr = nullptr;
  ncclResult_t rres = ib->irecv(p->rc, 1, &data, &size, &tag, &p->rmh, nullptr, &rr), sres = ncclSuccess;
  double rsecs = -1, ssecs = -1;
  while ((rsecs < 0 || ssecs < 0) && netNowNs() < deadline) {
    if (rsecs < 0 && rres == ncclSuccess && rr) rres = ib->test(rr, &rdone, nullptr);
    if (rsecs < 0 && rres != ncclSuccess) rsecs = (netNowNs() - silentAt) / 1e9;
    if (ssecs < 0 && sr == nullptr) sres = ib->isend(p->sc, p->src.data(), p->src.size(), 7, p->smh, nullptr, &sr);
    if (ssecs < 0 && sres != ncclSuccess) ssecs = (netNowNs() - silentAt) / 1e9;
  }
  EXPECT_TRUE(shQuiet("nft delete table ip railnet_silent"));
  EXPECT_EQ(sr, nullptr) << "a send went out with no clear-to-send";
  EXPECT_EQ(rdone, 0) << "a receive completed with no send";
  EXPECT_GE(rsecs, 0) << "the receiver still waits 60 s after its peer host went silent\n" << LogCapture::all();
  EXPECT_GE(ssecs, 0) << "the sender still waits 60 s after its peer host went silent\n" << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("stopped answering on this receive comm's connection", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("stopped answering on this send comm's connection", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("RAILNET_SOCKET_TIMEOUT_MSEC=4000 ms", NCCL_LOG_WARN)) << LogCapture::all();
  printf("peer host silent: the receiver failed after %.1f s, the sender after %.1f s (RAILNET_SOCKET_TIMEOUT_MSEC=4000)\n",
         rsecs, ssecs);
  p->close();
  faultMatrixRow("ib", "peer host silent (all packets dropped), idle comm, RAILNET_SOCKET_TIMEOUT_MSEC=4000",
                 "both sides fail: WARN the host stopped answering", rsecs > ssecs ? rsecs : ssecs);
}

// A fused comm (rxe0+rxe1 on both sides) whose rxe0 link goes down for good, with port
// failover off (NCCL's default) and asked for: this railnet has no failover yet, so both end
// as today, test() failing within the bound with the WARN that names the peer and the port;
// asked for, one INFO says failover is not available, and its forced ID-based matching and
// pre-posted receives fail as cleanly.
class IbFusedLinkDown : public IbFaultMatrix, public ::testing::WithParamInterface<int> {};

TEST_P(IbFusedLinkDown, FailsBoundedWithThePeerAndPort) {
  std::string why = vethOrWhy();
  if (!why.empty()) RAILNET_SKIP(why);
  int failover = GetParam();
  env.set("NCCL_IB_TIMEOUT", "16");  // 1.3 s of retries (see IbLinkDownForGood)
  env.set("NCCL_IB_RETRY_CNT", "4");
  env.set("NCCL_IB_RESILIENCY_PORT_FAILOVER", failover ? "1" : "0");
  LogCapture cap;
  init();
  int d = -1;
  ASSERT_EQ(ibFuseFirstTwoDevices(&d), ncclSuccess);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_EQ(ib->listen(ctx, d, handle, &lc), ncclSuccess);
  ASSERT_TRUE(netConnectPair(ib, ctx, d, handle, lc, &sc, &rc, 60000)) << LogCapture::all();
  ib->closeListen(lc);
  Pipe p(ib, sc, rc, 1 << 20);
  ASSERT_TRUE(p.reg());
  long long downAt = 0;
  std::string err = pump(p, 8, 40, netNowNs() + 30000000000LL, [&](int k) {
    if (k != 3) return;
    ASSERT_TRUE(shQuiet("ip link set veth0 down"));
    downAt = netNowNs();
  });
  ASSERT_NE(downAt, 0) << "the transfer ended before the link went down: " << err << LogCapture::all();
  double secs = (netNowNs() - downAt) / 1e9;
  EXPECT_EQ(softroceLinkUp("veth0"), 0);
  EXPECT_NE(err, "") << "the transfer completed across a link that was down";
  EXPECT_LT(secs, 20.0) << err;
  EXPECT_TRUE(LogCapture::contains("is DOWN now (its link went down)", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("198.18.0.", NCCL_LOG_WARN)) << LogCapture::all();
  if (failover) {
    // rxe0 and rxe1 are the two ends of one veth pair: both devices of the fused comm lose
    // their port, and failover has nothing left to move to
    EXPECT_TRUE(LogCapture::contains("completions matched by ID, receive work requests pre-posted"))
        << LogCapture::all();
    EXPECT_TRUE(LogCapture::contains("is not possible: no device of the comm is left", NCCL_LOG_WARN) ||
                LogCapture::contains("is not possible: no QP of the comm is left", NCCL_LOG_WARN))
        << LogCapture::all();
  }
  printf("fused link down, failover=%d: %s after %.1f s\n", failover, err.c_str(), secs);
  p.close();
  EXPECT_TRUE(waitPortsActive());
  faultMatrixRow("ib", failover ? "fused, one veth pair down (no device left), failover=1" : "fused, one link down, failover=0",
                 "test() fails: status, peer and port DOWN in the WARN", secs);
}

INSTANTIATE_TEST_SUITE_P(Failover, IbFusedLinkDown, ::testing::Values(0, 1));

// 1,000 connections of garbage (or nothing) to the IB listen port while a real connection
// is made on it and moves data: the real one gets correct data, the listener survives.
TEST_F(IbFaultMatrix, ListenPortFloodedWithGarbage) {
  init();
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  ASSERT_EQ(ib->listen(ctx, 0, handle, &lc), ncclSuccess);
  struct ncclIbHandle h;
  memcpy(&h, handle, sizeof(h));
  union ncclSocketAddress target = h.connectAddr;
  std::atomic<int> made(0);
  std::atomic<bool> stop(false);
  long long t0 = netNowNs();
  // at least 1,000 connections, and more until the transfer is over: the flood overlaps it
  std::atomic<int> duringTransfer(0);
  std::atomic<bool> transferring(false);
  std::thread flood([&] {
    // the first 1,000 at once; then, once data moves, more until it stops (3,000 at most: the
    // listener does not accept while data moves, and the VM's somaxconn is 4096)
    for (int i = 0; i < 3000; i++) {
      if (i >= 1000 && stop) break;
      if (i >= 1000 && !transferring) {
        usleep(1000);
        i--;
        continue;
      }
      if (transferring) duringTransfer++;
      int fd = socket(target.sa.sa_family, SOCK_STREAM, 0);
      if (fd < 0) continue;
      socklen_t len = target.sa.sa_family == AF_INET ? sizeof(target.sin) : sizeof(target.sin6);
      if (connect(fd, &target.sa, len) == 0) {
        char junk[24];
        for (int k = 0; k < 24; k++) junk[k] = (char)(i * 29 + k);
        if (i % 3 != 0 && write(fd, junk, (size_t)(i % 23)) < 0) {
        }
        made++;
      }
      ::close(fd);
    }
  });
  void *sc = nullptr, *rc = nullptr;
  bool ok = netConnectPair(ib, ctx, 1, handle, lc, &sc, &rc, 90000);
  std::string err = "no connection";
  if (ok) {
    Pipe p(ib, sc, rc, 1 << 20);
    transferring = true;
    err = p.reg() ? pump(p, 4, 50, netNowNs() + 90000000000LL) : "regMr failed";
    transferring = false;
    p.close();
  }
  stop = true;
  flood.join();
  EXPECT_GT(duringTransfer.load(), 0) << "no garbage connection was made while data moved";
  double secs = (netNowNs() - t0) / 1e9;
  EXPECT_TRUE(ok);
  EXPECT_EQ(err, "");
  EXPECT_GE(made.load(), 1000) << "the flood did not reach the listen port";
  // the listener still accepts after the flood
  void *sc2 = nullptr, *rc2 = nullptr;
  EXPECT_TRUE(netConnectPair(ib, ctx, 1, handle, lc, &sc2, &rc2, 90000));
  if (sc2) ib->closeSend(sc2);
  if (rc2) ib->closeRecv(rc2);
  ib->closeListen(lc);
  printf("flood: %d garbage connections made, %d of them while data moved\n", made.load(), duringTransfer.load());
  faultMatrixRow("ib", "listen port flooded (1000 garbage conns)", "correct data; listener still accepts", secs);
}

// netem on both ends of the veth pair: the Socket transport under delay with jitter and
// under reordering, the IB transport over rxe under a constant delay; all deliver correct
// data.
class NetemFaultMatrix : public IbFaultMatrix {
 protected:
  bool qdisc = false;
  void TearDown() override {
    if (qdisc) {
      shQuiet("tc qdisc del dev veth0 root");
      shQuiet("tc qdisc del dev veth1 root");
    }
    IbFaultMatrix::TearDown();
  }
  // "" or why netem is not available
  std::string netem(const std::string& spec) {
    std::string why = vethOrWhy();
    if (!why.empty()) return why;
    if (system("command -v tc >/dev/null 2>&1") != 0) return "no tc (iproute2)";
    for (const char* dev : {"veth0", "veth1"}) {
      std::string out = shOut(std::string("tc qdisc replace dev ") + dev + " root netem " + spec);
      if (out.find("[exit") != std::string::npos) return "tc qdisc netem failed on " + std::string(dev) + ": " + out;
      qdisc = true;
    }
    return "";
  }
  void ibCase(const std::string& spec, const std::string& name, double minDelayS) {
    init();
    LogCapture cap;
    std::unique_ptr<Pipe> p = pair(256 << 10);
    ASSERT_TRUE(p) << LogCapture::all();
    std::string why = netem(spec);
    if (!why.empty()) {
      p->close();
      RAILNET_SKIP(why);
    }
    long long t0 = netNowNs();
    std::string err = pump(*p, 3, 60, netNowNs() + 60000000000LL);
    double secs = (netNowNs() - t0) / 1e9;
    EXPECT_EQ(err, "") << LogCapture::all();
    // each message needs a clear-to-send and the data, each across the shaped pair: at least
    // two one-way delays per message, or the traffic did not cross netem
    EXPECT_GE(secs, 3 * 2 * minDelayS) << "too fast for the delay: did the traffic cross the veth pair?";
    p->close();
    faultMatrixRow("ib", name, err.empty() ? "correct data" : "FAILED: " + err, secs);
  }
  void socketCase(const std::string& spec, const std::string& name) {
    env.set("NCCL_SOCKET_IFNAME", "veth0");
    env.set("NCCL_SOCKET_NTHREADS", "2");
    env.set("NCCL_NSOCKS_PERTHREAD", "2");
    const ncclNet_t* net = railnetGetNet("socket");
    ASSERT_NE(net, nullptr);
    railnetSocketResetDevices();  // an earlier test of this process may have found other interfaces
    void* sctx = nullptr;
    ASSERT_EQ(net->init(&sctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
    LogCapture cap;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = nullptr, *sc = nullptr, *rc = nullptr;
    ASSERT_EQ(net->listen(sctx, 0, handle, &lc), ncclSuccess);
    ASSERT_TRUE(netConnectPair(net, sctx, 0, handle, lc, &sc, &rc, 60000)) << LogCapture::all();
    std::string why = netem(spec);
    if (!why.empty()) {
      net->closeSend(sc);
      net->closeRecv(rc);
      net->closeListen(lc);
      net->finalize(sctx);
      RAILNET_SKIP(why);
    }
    Pipe p(net, sc, rc, 2 << 20);
    ASSERT_TRUE(p.reg());
    long long tx0 = atoll(shOut("cat /sys/class/net/veth1/statistics/tx_bytes").c_str());
    long long t0 = netNowNs();
    std::string err = pump(p, 4, 80, netNowNs() + 60000000000LL);
    double secs = (netNowNs() - t0) / 1e9;
    EXPECT_EQ(err, "") << LogCapture::all();
    // the data crossed the veth pair (under netem), not lo
    long long tx = atoll(shOut("cat /sys/class/net/veth1/statistics/tx_bytes").c_str()) - tx0;
    EXPECT_GE(tx, 8ll << 20) << "bytes sent on veth1 during the transfer";
    p.close();
    net->closeListen(lc);
    net->finalize(sctx);
    railnetSocketResetDevices();
    faultMatrixRow("socket", name, err.empty() ? "correct data" : "FAILED: " + err, secs);
  }
};

// RoCE assumes an in-order fabric: under reordering rxe goes back N on every sequence gap
// and jitter reorders; a constant delay keeps the order.
TEST_F(NetemFaultMatrix, IbDelay) { ibCase("delay 10ms", "netem delay 10 ms (VM)", 0.010); }
TEST_F(NetemFaultMatrix, SocketDelayWithJitter) { socketCase("delay 20ms 10ms", "netem delay 20 ms +- 10 ms (VM)"); }
TEST_F(NetemFaultMatrix, SocketReorder) { socketCase("delay 10ms reorder 25% 50%", "netem reorder 25% (VM)"); }

}  // namespace
