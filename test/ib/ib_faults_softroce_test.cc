// Faults on real soft-RoCE (the tier's VM: rxe0/rxe1 on a veth pair): a peer process
// SIGKILLed in the middle of a stream of messages makes the surviving side's test() fail
// within a bounded time (rxe retransmits NCCL_IB_RETRY_CNT times, NCCL_IB_TIMEOUT apart,
// then completes with "transport retry counter exceeded") with a WARN naming the peer;
// several comms at once between the same two devices; and the plugin library, loaded
// like NCCL loads it with RAILNET_TRANSPORT=ib, reporting the rxe devices through the
// v8 and v12 interfaces. Skips when libibverbs lists fewer than two devices.
#include "test_util.h"
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <memory>
#include <string>
#include <vector>
#include "net_pair.h"
#include "plugin_loader.h"

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "railnet.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}
#include "ib_test_env.h"

namespace {

const ncclNet_t* ib = &railnetNetIb;

// Small retry budget: 4.096 us x 2^12 = 16.8 ms per try, 2 retries.
const char* kTimeout = "12";
const char* kRetryCnt = "2";
// What "bounded" means here, under TCG emulation (the budget above is ~50 ms).
const long long kBoundNs = 20000000000LL;
const size_t kMsg = 256 << 10;


bool readFull(int fd, void* buf, size_t n, int timeoutMs) {
  size_t got = 0;
  while (got < n) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeoutMs) <= 0) return false;
    ssize_t r = read(fd, (char*)buf + got, n - got);
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

std::string drain(int fd) {
  std::string s;
  char b[4096];
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) break;
    ssize_t r = read(fd, b, sizeof(b));
    if (r <= 0) break;
    s.append(b, (size_t)r);
  }
  return s;
}

struct Buf {
  std::unique_ptr<char[]> mem;
  void* mh = nullptr;
  Buf() : mem(new char[kMsg]) {}
};

// Posts isend of message k until a request comes back (a clear-to-send was seen).
void* postSend(void* comm, Buf& b, int k, long long deadline) {
  netPatternFill(b.mem.get(), kMsg, k);
  void* req = nullptr;
  while (req == nullptr && netNowNs() < deadline)
    if (ib->isend(comm, b.mem.get(), kMsg, k, b.mh, nullptr, &req) != ncclSuccess) return nullptr;
  return req;
}

void* postRecv(void* comm, Buf& b, int k) {
  void* data = b.mem.get();
  size_t size = kMsg;
  int tag = k;
  void* req = nullptr;
  if (ib->irecv(comm, 1, &data, &size, &tag, &b.mh, nullptr, &req) != ncclSuccess) return nullptr;
  return req;
}

// Polls test() on req until it fails; returns the ns it took, or -1 if it completed
// successfully or was still pending at the bound.
long long timeToFailure(void* req, std::string* what) {
  long long t0 = netNowNs();
  for (;;) {
    int done = 0, size = -1;
    ncclResult_t r = ib->test(req, &done, &size);
    if (r != ncclSuccess) {
      *what = "test() returned " + std::to_string(r);
      return netNowNs() - t0;
    }
    if (done) {
      *what = "the request completed (" + std::to_string(size) + " bytes)";
      return -1;
    }
    if (netNowNs() - t0 > kBoundNs) {
      *what = "test() still pending after " + std::to_string(kBoundNs / 1000000) + " ms";
      return -1;
    }
  }
}

// The peer named in "Got completion from peer <peer> with status=...".
std::string warnedPeer() {
  for (auto& l : LogCapture::lines()) {
    size_t a = l.msg.find("Got completion from peer ");
    if (a == std::string::npos) continue;
    a += strlen("Got completion from peer ");
    size_t e = l.msg.find(' ', a);
    return l.msg.substr(a, e == std::string::npos ? std::string::npos : e - a);
  }
  return "";
}

// The surviving side's request after its peer died: test() fails within the bound with
// ncclRemoteError. At short timeouts the QP's retries run out first: the WARN has the decoded
// status, its HINT, the comm's side and the peer. At NCCL's defaults (34 s of retries; for
// ever on soft-RoCE) the closed socket is what tells: within a few seconds, WARN with the
// side and the peer. Then the case's fault-matrix row.
void expectPeerDeathReported(void* req, const char* side, bool atDefaults, const char* caseName, const char* outcome) {
  std::string what;
  long long ns = timeToFailure(req, &what);
  ASSERT_GE(ns, 0) << what << "\n" << LogCapture::all();
  printf("%s comm: test() failed %.1f ms after its first post to the dead peer (%s)\n", side, ns / 1e6, what.c_str());
  EXPECT_EQ(what, "test() returned " + std::to_string(ncclRemoteError));
  if (atDefaults) {
    EXPECT_LT(ns, 10000000000LL) << "the peer's closed socket was not noticed within 10 s";
    EXPECT_TRUE(LogCapture::contains(std::string("closed its connection to this ") + side + " comm", NCCL_LOG_WARN))
        << LogCapture::all();
    EXPECT_TRUE(LogCapture::contains("Look at that rank's log", NCCL_LOG_WARN)) << LogCapture::all();
    EXPECT_FALSE(LogCapture::contains("retry counter exceeded", NCCL_LOG_WARN)) << LogCapture::all();
    faultMatrixRow("ib", std::string(caseName) + " at NCCL's default timeouts",
                   "test() fails: the peer closed its connection, WARN names it", ns / 1e9);
    return;
  }
  EXPECT_TRUE(LogCapture::contains("retry counter exceeded", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("HINT", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains(std::string(side) + " comm", NCCL_LOG_WARN)) << LogCapture::all();
  std::string peer = warnedPeer();
  EXPECT_TRUE(peer.find("198.18.0.") != std::string::npos || peer.find('<') != std::string::npos)
      << "peer '" << peer << "' in\n" << LogCapture::all();
  faultMatrixRow("ib", caseName, outcome, ns / 1e9);
}

class IbFaultTest : public ::testing::Test {
 protected:
  ScopedEnv env;
  pid_t child = -1;

  void SetUp() override {
    std::string why = ibTwoDevicesOrWhy(env);
    if (!why.empty()) RAILNET_SKIP(why);
    env.set("NCCL_IB_TIMEOUT", kTimeout);
    env.set("NCCL_IB_RETRY_CNT", kRetryCnt);
    railnetParamReset();
  }
  void TearDown() override {
    if (child > 0) {
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
    }
    railnetIbResetDevices();
    railnetParamReset();
  }
  void killChild() {
    ASSERT_GT(child, 0);
    ASSERT_EQ(kill(child, SIGKILL), 0);
    int st = 0;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    child = -1;
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "child status " << st;
  }
  // NCCL's own NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT (unset), for the peer and for this side
  void atNcclDefaults() {
    env.unset("NCCL_IB_TIMEOUT");
    env.unset("NCCL_IB_RETRY_CNT");
  }
  // fused: both sides on the vDevice rxe0+rxe1 with NCCL_IB_RESILIENCY_PORT_FAILOVER=1
  void receiverKilled(bool atDefaults, bool fused = false);
  void senderKilled(bool atDefaults, bool fused = false);
  void failoverOn(bool fused) {
    if (fused) env.set("NCCL_IB_RESILIENCY_PORT_FAILOVER", "1");
  }
  // device 'plain' of this process, or the fused rxe0+rxe1 (-1: makeVDevice failed)
  static int deviceFor(bool fused, int plain) {
    int d = plain;
    if (fused && ibFuseFirstTwoDevices(&d) != ncclSuccess) return -1;
    return d;
  }
};

// The receiver (a child on rxe0) takes two messages, posts clear-to-send for four more,
// and is killed. The sender (here, on rxe1) already holds those clear-to-sends: its next
// isend is posted, its RDMA writes go unacknowledged, and test() fails.
void IbFaultTest::receiverKilled(bool atDefaults, bool fused) {
  if (atDefaults) atNcclDefaults();
  failoverOn(fused);
  int hp[2], sp[2], lp[2];
  ASSERT_EQ(pipe(hp), 0);
  ASSERT_EQ(pipe(sp), 0);
  ASSERT_EQ(pipe(lp), 0);
  child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(lp[1], 2);
    railnetSetLogger(ibChildLogger);
    railnetIbResetDevices();
    void *cctx = nullptr, *lc = nullptr, *rc = nullptr;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    if (ib->init(&cctx, 0, nullptr, nullptr, nullptr) != ncclSuccess) _exit(3);
    int cdev = deviceFor(fused, 0);
    if (cdev < 0 || ib->listen(cctx, cdev, handle, &lc) != ncclSuccess) _exit(4);
    if (write(hp[1], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) _exit(5);
    long long deadline = netNowNs() + 60000000000LL;
    while (rc == nullptr) {
      if (ib->accept(lc, &rc, nullptr) != ncclSuccess || netNowNs() > deadline) _exit(6);
    }
    Buf bufs[6];
    void* reqs[6] = {};
    for (int k = 0; k < 6; k++)
      if (ib->regMr(rc, bufs[k].mem.get(), kMsg, NCCL_PTR_HOST, &bufs[k].mh) != ncclSuccess) _exit(7);
    for (int k = 0; k < 6; k++)
      if ((reqs[k] = postRecv(rc, bufs[k], k)) == nullptr) _exit(8);
    std::string err;
    for (int k = 0; k < 2; k++) {
      int size = -1;
      if (!netWait(ib, reqs[k], &size, deadline, &err) || size != (int)kMsg ||
          !netPatternCheck(bufs[k].mem.get(), kMsg, k, nullptr)) {
        fprintf(stderr, "receiver: message %d: %s size %d\n", k, err.c_str(), size);
        _exit(9);
      }
    }
    if (write(sp[1], "R", 1) != 1) _exit(10);
    for (;;) pause();  // receives 2..5 stay posted until the kill
  }
  close(hp[1]);
  close(sp[1]);
  close(lp[1]);
  LogCapture cap;
  void* ctx = nullptr;
  ASSERT_EQ(ib->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_TRUE(readFull(hp[0], handle, sizeof(handle), 60000)) << drain(lp[0]);
  void* sc = nullptr;
  long long deadline = netNowNs() + 60000000000LL;
  int dev = deviceFor(fused, 1);
  ASSERT_GE(dev, 0);
  while (sc == nullptr && netNowNs() < deadline) ASSERT_EQ(ib->connect(ctx, dev, handle, &sc, nullptr), ncclSuccess);
  ASSERT_NE(sc, nullptr) << drain(lp[0]);
  Buf bufs[3];
  for (auto& b : bufs) ASSERT_EQ(ib->regMr(sc, b.mem.get(), kMsg, NCCL_PTR_HOST, &b.mh), ncclSuccess);
  for (int k = 0; k < 2; k++) {
    void* req = postSend(sc, bufs[k], k, deadline);
    ASSERT_NE(req, nullptr) << "message " << k << ": " << drain(lp[0]);
    std::string err;
    int size = -1;
    ASSERT_TRUE(netWait(ib, req, &size, deadline, &err)) << err << LogCapture::all();
    EXPECT_EQ(size, (int)kMsg);
  }
  char c = 0;
  ASSERT_TRUE(readFull(sp[0], &c, 1, 60000)) << drain(lp[0]);
  ASSERT_EQ(c, 'R');
  usleep(500000);  // the receiver's clear-to-send writes for messages 2..5 land
  killChild();
  std::string childLog = drain(lp[0]);
  void* req = postSend(sc, bufs[2], 2, netNowNs() + 10000000000LL);
  ASSERT_NE(req, nullptr) << "no clear-to-send from the receiver before it died";
  expectPeerDeathReported(req, "send", atDefaults,
                          fused ? "receiver killed mid-transfer, fused, failover=1" : "receiver killed mid-transfer",
                          "sender's test() fails: retry exceeded, peer named");
  // the comm stays failed: later calls say so instead of hanging
  void* again = nullptr;
  EXPECT_NE(ib->isend(sc, bufs[0].mem.get(), 1, 3, bufs[0].mh, nullptr, &again), ncclSuccess);
  for (auto& b : bufs) EXPECT_EQ(ib->deregMr(sc, b.mh), ncclSuccess);
  EXPECT_EQ(ib->closeSend(sc), ncclSuccess);
  EXPECT_EQ(ib->finalize(ctx), ncclSuccess);
  close(hp[0]);
  close(sp[0]);
  close(lp[0]);
  EXPECT_EQ(childLog, "");
}

// The sender (a child on rxe1) sends two messages and is killed. The receiver (here, on
// rxe0) posts its next receive: the clear-to-send RDMA write to the dead peer goes
// unacknowledged, and the receive's test() fails.
TEST_F(IbFaultTest, ReceiverKilledMidTransferFailsTheSendersTestInBoundedTime) { receiverKilled(false); }
TEST_F(IbFaultTest, ReceiverKilledAtNcclDefaultTimeoutsFailsTheSenderWithinSeconds) { receiverKilled(true); }
TEST_F(IbFaultTest, ReceiverKilledAtNcclDefaultTimeoutsWithFailoverFailsTheSenderWithinSeconds) {
  receiverKilled(true, true);
}

void IbFaultTest::senderKilled(bool atDefaults, bool fused) {
  if (atDefaults) atNcclDefaults();
  failoverOn(fused);
  int hp[2], sp[2], lp[2];
  ASSERT_EQ(pipe(hp), 0);
  ASSERT_EQ(pipe(sp), 0);
  ASSERT_EQ(pipe(lp), 0);
  LogCapture cap;
  void* ctx = nullptr;
  ASSERT_EQ(ib->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  int dev = deviceFor(fused, 0);
  ASSERT_GE(dev, 0);
  ASSERT_EQ(ib->listen(ctx, dev, handle, &lc), ncclSuccess);
  child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(lp[1], 2);
    railnetSetLogger(ibChildLogger);
    railnetIbResetDevices();
    void *cctx = nullptr, *sc = nullptr;
    char h[NCCL_NET_HANDLE_MAXSIZE];
    if (!readFull(hp[0], h, sizeof(h), 60000)) _exit(3);
    if (ib->init(&cctx, 0, nullptr, nullptr, nullptr) != ncclSuccess) _exit(4);
    long long deadline = netNowNs() + 60000000000LL;
    int cdev = deviceFor(fused, 1);
    if (cdev < 0) _exit(5);
    while (sc == nullptr) {
      if (ib->connect(cctx, cdev, h, &sc, nullptr) != ncclSuccess || netNowNs() > deadline) _exit(5);
    }
    Buf bufs[2];
    for (int k = 0; k < 2; k++) {
      if (ib->regMr(sc, bufs[k].mem.get(), kMsg, NCCL_PTR_HOST, &bufs[k].mh) != ncclSuccess) _exit(6);
      void* req = postSend(sc, bufs[k], k, deadline);
      std::string err;
      int size = -1;
      if (req == nullptr || !netWait(ib, req, &size, deadline, &err)) {
        fprintf(stderr, "sender: message %d: %s\n", k, err.c_str());
        _exit(7);
      }
    }
    if (write(sp[1], "S", 1) != 1) _exit(8);
    for (;;) pause();
  }
  close(hp[0]);
  close(sp[1]);
  close(lp[1]);
  ASSERT_EQ(write(hp[1], handle, sizeof(handle)), (ssize_t)sizeof(handle));
  void* rc = nullptr;
  long long deadline = netNowNs() + 60000000000LL;
  while (rc == nullptr && netNowNs() < deadline) ASSERT_EQ(ib->accept(lc, &rc, nullptr), ncclSuccess);
  ASSERT_NE(rc, nullptr) << drain(lp[0]);
  Buf bufs[3];
  for (auto& b : bufs) ASSERT_EQ(ib->regMr(rc, b.mem.get(), kMsg, NCCL_PTR_HOST, &b.mh), ncclSuccess);
  for (int k = 0; k < 2; k++) {
    void* req = postRecv(rc, bufs[k], k);
    ASSERT_NE(req, nullptr);
    std::string err;
    int size = -1;
    ASSERT_TRUE(netWait(ib, req, &size, deadline, &err)) << err << LogCapture::all() << drain(lp[0]);
    EXPECT_EQ(size, (int)kMsg);
    EXPECT_TRUE(netPatternCheck(bufs[k].mem.get(), kMsg, k, nullptr));
  }
  char c = 0;
  ASSERT_TRUE(readFull(sp[0], &c, 1, 60000)) << drain(lp[0]);
  ASSERT_EQ(c, 'S');
  killChild();
  std::string childLog = drain(lp[0]);
  void* req = postRecv(rc, bufs[2], 2);
  ASSERT_NE(req, nullptr);
  expectPeerDeathReported(req, "receive", atDefaults,
                          fused ? "sender killed mid-transfer, fused, failover=1" : "sender killed mid-transfer",
                          "receiver's test() fails: retry exceeded, peer named");
  for (auto& b : bufs) EXPECT_EQ(ib->deregMr(rc, b.mh), ncclSuccess);
  EXPECT_EQ(ib->closeRecv(rc), ncclSuccess);
  EXPECT_EQ(ib->closeListen(lc), ncclSuccess);
  EXPECT_EQ(ib->finalize(ctx), ncclSuccess);
  close(hp[1]);
  close(sp[0]);
  close(lp[0]);
  EXPECT_EQ(childLog, "");
}

TEST_F(IbFaultTest, SenderKilledMidTransferFailsTheReceiversTestInBoundedTime) { senderKilled(false); }
TEST_F(IbFaultTest, SenderKilledAtNcclDefaultTimeoutsFailsTheReceiverWithinSeconds) { senderKilled(true); }
TEST_F(IbFaultTest, SenderKilledAtNcclDefaultTimeoutsWithFailoverFailsTheReceiverWithinSeconds) {
  senderKilled(true, true);
}

// Four comms rxe1 -> rxe0 at once, every comm with its own sizes and pattern, requests of
// all comms in flight together; each receive gets its comm's data.
TEST_F(IbFaultTest, SeveralCommsAtOnceBetweenTheSameTwoDevices) {
  const int N = 4, R = 6;
  void* ctx = nullptr;
  ASSERT_EQ(ib->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
  void *lc[N] = {}, *sc[N] = {}, *rc[N] = {};
  for (int i = 0; i < N; i++) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    ASSERT_EQ(ib->listen(ctx, 0, handle, &lc[i]), ncclSuccess);
    ASSERT_TRUE(netConnectPair(ib, ctx, 1, handle, lc[i], &sc[i], &rc[i])) << "comm " << i;
  }
  struct Side {
    std::vector<char> mem;
    void* mh = nullptr;
    void* req = nullptr;
  };
  long long deadline = netNowNs() + 60000000000LL;
  for (int r = 0; r < R; r++) {
    Side s[N], d[N];
    size_t size[N];
    for (int i = 0; i < N; i++) {
      size[i] = (size_t)(1 + i * 70001 + r * 3001) % (300 << 10);
      s[i].mem.assign(size[i], 0);
      d[i].mem.assign(size[i] + 64, 0);
      netPatternFill(s[i].mem.data(), size[i], i * 100 + r);
      ASSERT_EQ(ib->regMr(sc[i], s[i].mem.data(), size[i], NCCL_PTR_HOST, &s[i].mh), ncclSuccess);
      ASSERT_EQ(ib->regMr(rc[i], d[i].mem.data(), d[i].mem.size(), NCCL_PTR_HOST, &d[i].mh), ncclSuccess);
    }
    for (int i = N - 1; i >= 0; i--) {  // receives in the reverse order of the sends
      void* data = d[i].mem.data();
      size_t sz = d[i].mem.size();
      int tag = r;
      ASSERT_EQ(ib->irecv(rc[i], 1, &data, &sz, &tag, &d[i].mh, nullptr, &d[i].req), ncclSuccess);
      ASSERT_NE(d[i].req, nullptr);
    }
    std::vector<int> got(2 * N, -1);
    for (bool all = false; !all;) {
      all = true;
      for (int i = 0; i < N; i++) {
        if (s[i].req == nullptr) {
          ASSERT_EQ(ib->isend(sc[i], s[i].mem.data(), size[i], r, s[i].mh, nullptr, &s[i].req), ncclSuccess);
        }
        all = all && s[i].req != nullptr;
        // the receives progress meanwhile, as NCCL's proxy tests them (a request-to-send of an
        // eager comm is answered there); one that completes is tested no more below
        int done = 0;
        if (s[i].req == nullptr && d[i].req != nullptr) {
          ASSERT_EQ(ib->test(d[i].req, &done, &got[N + i]), ncclSuccess);
        }
        if (done) d[i].req = nullptr;
      }
      ASSERT_LT(netNowNs(), deadline) << "round " << r << ": no clear-to-send";
    }
    // complete them interleaved: one test() per pending request per pass
    int pending = 0;
    for (int i = 0; i < N; i++) pending += (s[i].req != nullptr) + (d[i].req != nullptr);
    while (pending > 0) {
      for (int j = 0; j < 2 * N; j++) {
        Side& x = j < N ? s[j] : d[j - N];
        if (x.req == nullptr) continue;
        int done = 0;
        ASSERT_EQ(ib->test(x.req, &done, &got[j]), ncclSuccess) << LogCapture::all();
        if (done) {
          x.req = nullptr;
          pending--;
        }
      }
      ASSERT_LT(netNowNs(), deadline) << "round " << r << ": " << pending << " requests pending";
    }
    for (int i = 0; i < N; i++) {
      EXPECT_EQ(got[i], (int)size[i]) << "comm " << i << " round " << r;
      EXPECT_EQ(got[N + i], (int)size[i]) << "comm " << i << " round " << r;
      size_t bad = 0;
      EXPECT_TRUE(netPatternCheck(d[i].mem.data(), size[i], i * 100 + r, &bad))
          << "comm " << i << " round " << r << " byte " << bad;
      EXPECT_EQ(ib->deregMr(sc[i], s[i].mh), ncclSuccess);
      EXPECT_EQ(ib->deregMr(rc[i], d[i].mh), ncclSuccess);
    }
  }
  for (int i = 0; i < N; i++) {
    EXPECT_EQ(ib->closeSend(sc[i]), ncclSuccess);
    EXPECT_EQ(ib->closeRecv(rc[i]), ncclSuccess);
    EXPECT_EQ(ib->closeListen(lc[i]), ncclSuccess);
  }
  EXPECT_EQ(ib->finalize(ctx), ncclSuccess);
}

// libnccl-net-railnet.so as NCCL loads it, RAILNET_TRANSPORT=ib: v12 and v8 init, devices
// and getProperties report the rxe devices under the name RailIB.
TEST_F(IbFaultTest, PluginLibraryReportsTheRxeDevicesThroughV8AndV12) {
  env.set("RAILNET_TRANSPORT", "ib");
  std::string err;
  void* lib = loadPluginFromBuild("railnet", &err);
  ASSERT_NE(lib, nullptr) << err;
  auto* v12 = reinterpret_cast<ncclNet_v12_t*>(dlsym(lib, "ncclNetPlugin_v12"));
  auto* v8 = reinterpret_cast<ncclNet_v8_t*>(dlsym(lib, "ncclNetPlugin_v8"));
  ASSERT_TRUE(v12 && v8);
  EXPECT_STREQ(v12->name, "RailIB");
  LogCapture cap;
  void* ctx = nullptr;
  ASSERT_EQ(v12->init(&ctx, 0, nullptr, LogCapture::logger, nullptr), ncclSuccess) << LogCapture::all();
  ASSERT_EQ(v8->init(LogCapture::logger), ncclSuccess) << LogCapture::all();
  EXPECT_STREQ(v12->name, "RailIB");
  EXPECT_STREQ(v8->name, "RailIB");
  int n12 = 0, n8 = 0;
  ASSERT_EQ(v12->devices(&n12), ncclSuccess);
  ASSERT_EQ(v8->devices(&n8), ncclSuccess);
  EXPECT_EQ(n8, n12);
  EXPECT_GE(n12, 2);
  std::string names12, names8;
  for (int d = 0; d < n12; d++) {
    ncclNetProperties_v12_t p12;
    ncclNetProperties_v8_t p8;
    ASSERT_EQ(v12->getProperties(d, &p12), ncclSuccess);
    ASSERT_EQ(v8->getProperties(d, &p8), ncclSuccess);
    ASSERT_NE(p12.name, nullptr);
    ASSERT_NE(p8.name, nullptr);
    names12 += std::string(p12.name) + " ";
    names8 += std::string(p8.name) + " ";
    EXPECT_STREQ(p12.name, p8.name);
    EXPECT_TRUE(p12.ptrSupport & NCCL_PTR_HOST);
    EXPECT_TRUE(p8.ptrSupport & NCCL_PTR_HOST);
    EXPECT_GT(p12.speed, 0);
    EXPECT_EQ(p12.speed, p8.speed);
    EXPECT_EQ(p12.port, p8.port);
    EXPECT_EQ(p12.guid, p8.guid);
    EXPECT_EQ(p12.vProps.ndevs, 1);
    EXPECT_GE(p12.maxComms, 1);
    printf("device %d: %s port %d speed %d Mbps guid 0x%llx\n", d, p12.name, p12.port, p12.speed,
           (unsigned long long)p12.guid);
  }
  EXPECT_NE(names12.find("rxe0"), std::string::npos) << names12;
  EXPECT_NE(names12.find("rxe1"), std::string::npos) << names12;
  EXPECT_EQ(names8, names12);
  if (v12->finalize) {
    EXPECT_EQ(v12->finalize(ctx), ncclSuccess);
  }
  // No dlclose here: UnloadWhileV8StillHoldsTheDevices below does that in a child.
}

// NCCL dlcloses net plugins; v8 has no finalize, so its reference on the IB devices (and
// their async event threads) is still there when the library goes away. The library
// must stop those threads at unload, or they run in unmapped code (SIGSEGV).
TEST_F(IbFaultTest, UnloadWhileV8StillHoldsTheDevices) {
  env.set("RAILNET_TRANSPORT", "ib");
  pid_t pid = fork();
  if (pid == 0) {
    std::string err;
    void* lib = loadPluginFromBuild("railnet", &err);
    if (lib == nullptr) _exit(2);
    auto* v12 = reinterpret_cast<ncclNet_v12_t*>(dlsym(lib, "ncclNetPlugin_v12"));
    auto* v8 = reinterpret_cast<ncclNet_v8_t*>(dlsym(lib, "ncclNetPlugin_v8"));
    void* ctx = nullptr;
    if (!v12 || !v8 || v12->init(&ctx, 0, nullptr, nullptr, nullptr) != ncclSuccess ||
        v8->init(nullptr) != ncclSuccess)
      _exit(3);
    v12->finalize(ctx);
    dlclose(lib);
    usleep(500000);  // async threads would wake up (100 ms polls) in unmapped code by now
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status)) : "exit " + std::to_string(WEXITSTATUS(status)));
}

}  // namespace
