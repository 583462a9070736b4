// The Socket transport through its ncclNet API between two processes on loopback.
#include <poll.h>
#include <string.h>
#include <signal.h>
#include <algorithm>
#include <functional>
#include <sys/wait.h>
#include <unistd.h>
#include "net_pair.h"
#include "test_util.h"

extern "C" {
#include "railnet.h"
}

namespace {

const ncclNet_t* net() { return railnetGetNet("socket"); }

struct NetSocket : ::testing::Test {
  ScopedEnv env;
  void* ctx = nullptr;
  void SetUp() override {
    env.set("NCCL_SOCKET_IFNAME", "lo");
    // a receiver that is slow to read (page faults of a 64 MiB buffer on a loaded machine)
    // must not trip the dead-peer timeout
    env.set("RAILNET_SOCKET_TIMEOUT_MSEC", "30000");
    ASSERT_NE(net(), nullptr);
    ASSERT_EQ(net()->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
    int n = 0;
    ASSERT_EQ(net()->devices(&n), ncclSuccess);
    ASSERT_GE(n, 1);
    ncclNetProperties_t p;
    ASSERT_EQ(net()->getProperties(0, &p), ncclSuccess);
    ASSERT_STREQ(p.name, "lo") << "the first Socket device of this process must be lo for these tests";
  }
  void TearDown() override {
    if (ctx) net()->finalize(ctx);
  }

  // Receiver here, sender in a child process: returns "" or what went wrong.
  std::string transfer(const NetPlan& plan) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void* lc = nullptr;
    if (net()->listen(ctx, 0, handle, &lc) != ncclSuccess) return "listen failed";
    std::string err;
    int rc = -1;
    pid_t pid = fork();
    if (pid == 0) {
      std::string e;
      int r = netRunSender(net(), ctx, 0, handle, plan, &e);
      if (r) fprintf(stderr, "sender: %s\n", e.c_str());
      _exit(r);
    }
    rc = netRunReceiver(net(), lc, plan, &err);
    int status = 0;
    long long deadline = netNowNs() + 30000000000LL;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (netNowNs() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        err += " (sender killed after the deadline)";
        break;
      }
      usleep(1000);
    }
    net()->closeListen(lc);
    if (rc != 0) return "receiver: " + err;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "sender failed";
    return "";
  }
};

TEST_F(NetSocket, Properties) {
  ncclNetProperties_t p;
  ASSERT_EQ(net()->getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(p.maxRecvs, 1);
  EXPECT_EQ(p.maxComms, 65536);
  EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
  EXPECT_EQ(p.pciPath, nullptr);  // lo has no device
  EXPECT_EQ(p.speed, 10000);      // lo has no speed: NCCL's fallback
  EXPECT_EQ((long long)p.maxP2pBytes, (long long)NCCL_MAX_NET_SIZE_BYTES);
  EXPECT_EQ(net()->getProperties(99, &p), ncclInvalidArgument);
  EXPECT_EQ(net()->getProperties(-1, &p), ncclInvalidArgument);
}

TEST_F(NetSocket, DataIntegrityAllSizes) {
  NetPlan plan;
  plan.sizes = {0, 1, 7, 4095, 65536, (1 << 20) + 3, 64u << 20};
  EXPECT_EQ(transfer(plan), "");
}

TEST_F(NetSocket, ManyRequestsInFlight) {
  NetPlan plan;
  for (int i = 0; i < 200; i++) plan.sizes.push_back((size_t)(i * 997) % 300000);
  plan.inflight = NCCL_NET_MAX_REQUESTS;
  EXPECT_EQ(transfer(plan), "");
}

// The receive side reads the control stream ahead into a staging buffer of
// RAILNET_SOCKET_STAGE bytes: records, inline payloads and (without data sockets) whole
// payloads of many messages at once. Bursts of sizes around the inline limit and the
// stage's size, empty messages, receive buffers larger than the messages, with and without
// data sockets (payloads up to RAILNET_SOCKET_CTRL_PAYLOAD on the control socket, or with it
// 0 NCCL's layout): every byte and every size right.
TEST_F(NetSocket, ControlStreamStagingKeepsEveryMessageWhole) {
  for (const char* nt : {"0", "2", "2 (ctrl payload 0)"}) {
    env.set("RAILNET_SOCKET_CTRL_PAYLOAD", strchr(nt, '(') ? "0" : nullptr);
    env.set("NCCL_SOCKET_NTHREADS", std::string(nt).substr(0, 1).c_str());
    env.set("NCCL_NSOCKS_PERTHREAD", "2");
    NetPlan plan;
    const size_t cycle[] = {0, 1, 16, 127, 128, 129, 4096, 8191, 8192, 16383, 16384, 16385, 40000, 0, 8, 100000};
    for (int i = 0; i < 400; i++) plan.sizes.push_back(cycle[i % 16]);
    // and grouped as NCCL posts them: receive buffers larger than what arrives
    for (int g = 0; g < 40; g++) {
      std::vector<NetMsg> grp(1);
      grp[0].recvSize = 65536;
      grp[0].sendSize = cycle[g % 16] > 65536 ? 65536 : cycle[g % 16];
      plan.groups.push_back(grp);
    }
    plan.inflight = NCCL_NET_MAX_REQUESTS;
    EXPECT_EQ(transfer(plan), "") << nt << " threads";
  }
}

// One send or receive call moves at most RAILNET_SOCKET_SYSCALL_BYTES (512 KiB): a payload on
// the control socket larger than that, or a burst of them that adds up to more, goes in
// pieces, and no record of a later message may slip between two pieces. Without data sockets
// (every payload on the control socket), with 2 x 2 and payloads up to 1 MiB on the control
// socket, and with inline payloads of up to 600000 bytes (records and their inline bytes add
// up past the cap: a call stops taking requests there), many in flight: every byte and every
// size right.
TEST_F(NetSocket, ControlStreamPayloadsLargerThanOneCallStayInOrder) {
  struct Cfg {
    const char *threads, *ctrlPayload, *inl;
  };
  for (Cfg cfg : {Cfg{"0", nullptr, nullptr}, Cfg{"2", "1048576", nullptr}, Cfg{"0", nullptr, "600000"}}) {
    env.set("NCCL_SOCKET_NTHREADS", cfg.threads);
    env.set("NCCL_NSOCKS_PERTHREAD", "2");
    env.set("RAILNET_SOCKET_CTRL_PAYLOAD", cfg.ctrlPayload);
    env.set("NCCL_SOCKET_INLINE", cfg.inl);
    NetPlan plan;
    const size_t cycle[] = {65536, 1, 524288 - 20, 700001, 65535, 200, (1 << 20) + 3, 65536, 0, 524288 + 1};
    for (int i = 0; i < 120; i++) plan.sizes.push_back(cycle[i % 10]);
    plan.inflight = NCCL_NET_MAX_REQUESTS;
    EXPECT_EQ(transfer(plan), "") << cfg.threads << " threads, control payloads up to "
                                  << (cfg.ctrlPayload ? cfg.ctrlPayload : "the default") << ", inline "
                                  << (cfg.inl ? cfg.inl : "128");
  }
}

// 32 requests in flight, each with a chunk on the one data socket: the socket's task queue
// is full while its thread finishes tasks, and no slot may be reused too early.
TEST_F(NetSocket, FullTaskQueueOnOneDataSocket) {
  env.set("NCCL_SOCKET_NTHREADS", "1");
  env.set("NCCL_NSOCKS_PERTHREAD", "1");
  NetPlan plan;
  for (int i = 0; i < 600; i++) plan.sizes.push_back(70000 + (i % 5));
  plan.inflight = NCCL_NET_MAX_REQUESTS;
  EXPECT_EQ(transfer(plan), "");
}

TEST_F(NetSocket, ThreadsTimesSockets) {
  for (int nt : {1, 2, 4}) {
    for (int ns : {1, 2, 4}) {
      env.set("NCCL_SOCKET_NTHREADS", std::to_string(nt).c_str());
      env.set("NCCL_NSOCKS_PERTHREAD", std::to_string(ns).c_str());
      NetPlan plan;
      plan.sizes = {0, 100, 129, 65537, (1 << 20) + 3, 9u << 20};
      plan.inflight = 4;
      EXPECT_EQ(transfer(plan), "") << nt << " threads x " << ns << " sockets";
    }
  }
}

// Once test() has cut a send into tasks, the helper threads finish it even if that send is
// never tested again. Here the big send is cut inside the test() of the small send before it
// (test drives the comm's control socket in posting order): the caller's one attempt moves
// what the socket takes, and the only thread then waits for the receives alone.
TEST_F(NetSocket, HelpersFinishASendThatIsNotTestedAgain) {
  for (const char* cfg : {"1 1", "2 2"}) {
    env.set("NCCL_SOCKET_NTHREADS", std::string(cfg, 1).c_str());
    env.set("NCCL_NSOCKS_PERTHREAD", cfg + 2);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc, *s, *r;
    ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
    ASSERT_TRUE(netConnectPair(net(), ctx, 0, handle, lc, &s, &r));
    size_t sizes[2] = {8, 48u << 20};  // far more than loopback's socket buffers hold
    std::vector<char> sb[2], rb[2];
    void *sreq[2], *rreq[2];
    for (int i = 0; i < 2; i++) {
      sb[i].resize(sizes[i]);
      rb[i].assign(sizes[i], 0);
      netPatternFill(sb[i].data(), sizes[i], 3 + i);
      void* d = rb[i].data();
      int tag = i;
      ASSERT_EQ(net()->irecv(r, 1, &d, &sizes[i], &tag, nullptr, nullptr, &rreq[i]), ncclSuccess);
    }
    for (int i = 0; i < 2; i++)
      ASSERT_EQ(net()->isend(s, sb[i].data(), sizes[i], i, nullptr, nullptr, &sreq[i]), ncclSuccess);
    std::string err;
    int got = -1;
    ASSERT_TRUE(netWait(net(), sreq[0], &got, netNowNs() + 30000000000LL, &err)) << cfg << ": " << err;
    for (int i = 0; i < 2; i++) {
      ASSERT_TRUE(netWait(net(), rreq[i], &got, netNowNs() + 30000000000LL, &err)) << cfg << ": " << err;
      EXPECT_EQ(got, (int)sizes[i]);
      EXPECT_TRUE(netPatternCheck(rb[i].data(), sizes[i], 3 + i, nullptr)) << cfg;
    }
    ASSERT_TRUE(netWait(net(), sreq[1], &got, netNowNs() + 30000000000LL, &err)) << cfg << ": " << err;
    EXPECT_EQ(net()->closeSend(s), ncclSuccess);
    EXPECT_EQ(net()->closeRecv(r), ncclSuccess);
    EXPECT_EQ(net()->closeListen(lc), ncclSuccess);
  }
}

TEST_F(NetSocket, SeveralCommsAtOnce) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
  const int N = 4;
  void *s[N], *r[N];
  for (int i = 0; i < N; i++) ASSERT_TRUE(netConnectPair(net(), ctx, 0, handle, lc, &s[i], &r[i]));
  std::vector<std::vector<char>> sb(N), rb(N);
  void *sreq[N], *rreq[N];
  for (int i = 0; i < N; i++) {
    size_t size = 100000 + i;
    sb[i].resize(size);
    rb[i].assign(size, 0);
    netPatternFill(sb[i].data(), size, i);
    void* d = rb[i].data();
    int tag = 5;
    ASSERT_EQ(net()->irecv(r[i], 1, &d, &size, &tag, nullptr, nullptr, &rreq[i]), ncclSuccess);
    ASSERT_EQ(net()->isend(s[i], sb[i].data(), size, 5, nullptr, nullptr, &sreq[i]), ncclSuccess);
  }
  long long deadline = netNowNs() + 20000000000LL;
  for (int i = 0; i < N; i++) {
    std::string err;
    int size = -1;
    ASSERT_TRUE(netWait(net(), sreq[i], &size, deadline, &err)) << err;
    ASSERT_TRUE(netWait(net(), rreq[i], &size, deadline, &err)) << err;
    EXPECT_EQ(size, 100000 + i);
    EXPECT_TRUE(netPatternCheck(rb[i].data(), rb[i].size(), i, nullptr)) << "comm " << i;
  }
  for (int i = 0; i < N; i++) {
    EXPECT_EQ(net()->closeSend(s[i]), ncclSuccess);
    EXPECT_EQ(net()->closeRecv(r[i]), ncclSuccess);
  }
  EXPECT_EQ(net()->closeListen(lc), ncclSuccess);
}

TEST_F(NetSocket, OutOfRequestSlotsGivesNullRequest) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *s, *r;
  ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
  ASSERT_TRUE(netConnectPair(net(), ctx, 0, handle, lc, &s, &r));
  char buf[8] = {0};
  void* req = nullptr;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    ASSERT_EQ(net()->isend(s, buf, sizeof(buf), 0, nullptr, nullptr, &req), ncclSuccess);
    ASSERT_NE(req, nullptr) << i;
  }
  ASSERT_EQ(net()->isend(s, buf, sizeof(buf), 0, nullptr, nullptr, &req), ncclSuccess);
  EXPECT_EQ(req, nullptr);
  // closing with requests in flight releases everything (checked by valgrind/LSan runs)
  EXPECT_EQ(net()->closeSend(s), ncclSuccess);
  EXPECT_EQ(net()->closeRecv(r), ncclSuccess);
  EXPECT_EQ(net()->closeListen(lc), ncclSuccess);
}

TEST_F(NetSocket, ReceiveBufferTooSmallIsInvalidUsage) {
  LogCapture log;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *s, *r;
  ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
  ASSERT_TRUE(netConnectPair(net(), ctx, 0, handle, lc, &s, &r));
  std::vector<char> big(5000, 'x'), small(1000, 0);
  void *sreq, *rreq;
  void* d = small.data();
  size_t sz = small.size();
  int tag = 1;
  ASSERT_EQ(net()->irecv(r, 1, &d, &sz, &tag, nullptr, nullptr, &rreq), ncclSuccess);
  ASSERT_EQ(net()->isend(s, big.data(), big.size(), 1, nullptr, nullptr, &sreq), ncclSuccess);
  int done = 0, size = 0;
  ncclResult_t res = ncclSuccess;
  long long deadline = netNowNs() + 10000000000LL;
  while (res == ncclSuccess && !done && netNowNs() < deadline) {
    int sd;
    net()->test(sreq, &sd, nullptr);
    res = net()->test(rreq, &done, &size);
  }
  EXPECT_EQ(res, ncclInvalidUsage);
  EXPECT_TRUE(LogCapture::contains("5000 bytes but the receive buffer holds 1000 bytes", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](char c) { return c == 0; })) << "nothing written";
  net()->closeSend(s);
  net()->closeRecv(r);
  net()->closeListen(lc);
}

TEST_F(NetSocket, CudaPointerRefused) {
  LogCapture log;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *s, *r, *mh = nullptr;
  ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
  ASSERT_TRUE(netConnectPair(net(), ctx, 0, handle, lc, &s, &r));
  char buf[16];
  EXPECT_EQ(net()->regMr(s, buf, sizeof(buf), NCCL_PTR_CUDA, &mh), ncclInternalError);
  EXPECT_TRUE(LogCapture::contains("CUDA", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_EQ(net()->regMr(s, buf, sizeof(buf), NCCL_PTR_HOST, &mh), ncclSuccess);
  EXPECT_EQ(net()->deregMr(s, mh), ncclSuccess);
  void* freq = (void*)1;
  void* d = buf;
  int sz = 16;
  EXPECT_EQ(net()->iflush(r, 1, &d, &sz, &mh, &freq), ncclSuccess);
  EXPECT_EQ(freq, nullptr);
  net()->closeSend(s);
  net()->closeRecv(r);
  net()->closeListen(lc);
}

TEST_F(NetSocket, GarbageOrTruncatedHandleRefused) {
  LogCapture log;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc;
  ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
  void* comm = nullptr;
  ncclNetDeviceHandle_t* dc;
  char garbage[NCCL_NET_HANDLE_MAXSIZE];
  for (int i = 0; i < NCCL_NET_HANDLE_MAXSIZE; i++) garbage[i] = (char)(i * 37 + 11);
  EXPECT_EQ(net()->connect(ctx, 0, garbage, &comm, &dc), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  char truncated[NCCL_NET_HANDLE_MAXSIZE];
  memcpy(truncated, handle, 17);  // handle magic intact, address cut off
  memset(truncated + 17, 0, sizeof(truncated) - 17);
  EXPECT_EQ(net()->connect(ctx, 0, truncated, &comm, &dc), ncclInvalidArgument);
  char zero[NCCL_NET_HANDLE_MAXSIZE] = {0};
  EXPECT_EQ(net()->connect(ctx, 0, zero, &comm, &dc), ncclInvalidArgument);
  EXPECT_TRUE(LogCapture::contains("connect handle", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_EQ(net()->connect(ctx, 7, handle, &comm, &dc), ncclInvalidArgument);  // no such device
  net()->closeListen(lc);
}

// A connect its caller abandoned (its listener went away, so it was still retrying) and a
// new handle written into the same buffer: the next connect with that buffer is a new
// connect, to the new listener, not the old one resumed (conn_stage.c, shared with IB).
TEST_F(NetSocket, AbandonedConnectDroppedForNewHandleAtSameAddress) {
  LogCapture log;
  char handle[NCCL_NET_HANDLE_MAXSIZE], fresh[NCCL_NET_HANDLE_MAXSIZE];
  void *gone = nullptr, *lc = nullptr;
  ASSERT_EQ(net()->listen(ctx, 0, handle, &gone), ncclSuccess);
  ASSERT_EQ(net()->listen(ctx, 0, fresh, &lc), ncclSuccess);  // open together: another port
  ASSERT_NE(memcmp(handle, fresh, sizeof(handle)), 0);
  ASSERT_EQ(net()->closeListen(gone), ncclSuccess);  // its port refuses now: the connect retries
  void* comm = nullptr;
  ncclNetDeviceHandle_t* dc = nullptr;
  ASSERT_EQ(net()->connect(ctx, 0, handle, &comm, &dc), ncclSuccess);
  ASSERT_EQ(comm, nullptr) << "a connect to a closed port cannot be complete";
  memcpy(handle, fresh, sizeof(handle));  // the caller reuses its buffer for a new handle
  void *s = nullptr, *r = nullptr;
  EXPECT_TRUE(netConnectPair(net(), ctx, 0, handle, lc, &s, &r, 10000)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("dropping an abandoned connect", NCCL_LOG_INFO)) << LogCapture::all();
  if (s) {
    EXPECT_EQ(net()->closeSend(s), ncclSuccess);
  }
  if (r) {
    EXPECT_EQ(net()->closeRecv(r), ncclSuccess);
  }
  EXPECT_EQ(net()->closeListen(lc), ncclSuccess);
}

// A sender killed (SIGKILL) mid-transfer: the receiver's test() fails within the
// transport's bounded time with a WARN naming the peer; nothing hangs.
TEST_F(NetSocket, PeerKilledMidTransferFailsReceiver) {
  for (int nt : {0, 2}) {
    env.set("NCCL_SOCKET_NTHREADS", std::to_string(nt).c_str());
    env.set("NCCL_NSOCKS_PERTHREAD", "2");
    LogCapture log;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void* lc;
    ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
      void* comm = nullptr;
      ncclNetDeviceHandle_t* dc;
      while (comm == nullptr)
        if (net()->connect(ctx, 0, handle, &comm, &dc) != ncclSuccess) _exit(1);
      size_t size = 256u << 20;
      char* buf = new char[size];
      memset(buf, 1, size);
      void* req;
      net()->isend(comm, buf, size, 0, nullptr, nullptr, &req);
      int done = 0, sz;
      long long t0 = netNowNs();
      // send part of it, tell the parent, then wait to be killed
      while (netNowNs() - t0 < 200000000LL) net()->test(req, &done, &sz);
      if (write(pipefd[1], "x", 1) != 1) _exit(2);
      for (;;) pause();
    }
    close(pipefd[1]);
    void* rc = nullptr;
    ncclNetDeviceHandle_t* dc;
    long long deadline = netNowNs() + 20000000000LL;
    while (rc == nullptr && netNowNs() < deadline) ASSERT_EQ(net()->accept(lc, &rc, &dc), ncclSuccess);
    ASSERT_NE(rc, nullptr);
    size_t size = 256u << 20;
    std::vector<char> buf(size);
    void* d = buf.data();
    int tag = 0;
    void* req;
    ASSERT_EQ(net()->irecv(rc, 1, &d, &size, &tag, nullptr, nullptr, &req), ncclSuccess);
    int done = 0, sz;
    char c;
    // the child sends until the socket buffers are full (nothing is read here yet), then
    // says so: it is mid-transfer when it is killed
    struct pollfd pfd = {pipefd[0], POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 20000), 1);
    ASSERT_EQ(read(pipefd[0], &c, 1), 1);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    long long killed = netNowNs();
    ncclResult_t res = ncclSuccess;
    while (res == ncclSuccess && !done && netNowNs() < killed + 60000000000LL) res = net()->test(req, &done, &sz);
    EXPECT_EQ(res, ncclRemoteError) << "threads " << nt;
    EXPECT_EQ(done, 0);
    EXPECT_LT(netNowNs() - killed, 45000000000LL);  // draining the buffered bytes under valgrind takes ~10 s
    EXPECT_TRUE(LogCapture::contains("127.0.0.1", NCCL_LOG_WARN)) << LogCapture::all();
    EXPECT_EQ(net()->test(req, &done, &sz), ncclRemoteError);  // stays failed
    close(pipefd[0]);
    net()->closeRecv(rc);
    net()->closeListen(lc);
  }
}

}  // namespace
