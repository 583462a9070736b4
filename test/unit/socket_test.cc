// The socket layer on loopback: address strings, bounded connect retries, and the
// accept that rejects stray clients while it keeps serving real peers.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <poll.h>
#include <unistd.h>
#include <thread>
#include <vector>
#include "net_pair.h"
#include "test_util.h"

extern "C" {
#include "socket.h"
}

namespace {

std::string str(const union ncclSocketAddress& a) {
  char buf[SOCKET_NAME_MAXLEN];
  return ncclSocketToString(&a, buf, 1);
}

TEST(SocketAddr, GoodStrings) {
  union ncclSocketAddress a;
  ASSERT_EQ(ncclSocketGetAddrFromString(&a, "198.18.0.1:1234"), ncclSuccess);
  EXPECT_EQ(a.sa.sa_family, AF_INET);
  EXPECT_EQ(str(a), "198.18.0.1<1234>");
  ASSERT_EQ(ncclSocketGetAddrFromString(&a, "[2001:db8::5]:80"), ncclSuccess);
  EXPECT_EQ(a.sa.sa_family, AF_INET6);
  EXPECT_EQ(str(a), "2001:db8::5<80>");
  ASSERT_EQ(ncclSocketGetAddrFromString(&a, "localhost:7"), ncclSuccess);
  EXPECT_TRUE(a.sa.sa_family == AF_INET || a.sa.sa_family == AF_INET6);
  EXPECT_EQ(railnetSockaddrLen(&a) > 0, true);
}

TEST(SocketAddr, BadStringsAreErrorsNotCrashes) {
  LogCapture log;
  union ncclSocketAddress a;
  std::string longName(5000, 'a');
  for (const char* bad : {"", ":", "1.2.3.4", "1.2.3.4:", "1.2.3.4:99999", "1.2.3.4:-1", "1.2.3.4:12x",
                          "2001:db8::1:80", "[2001:db8::1]", "[2001:db8::1]80", "[]:80", "[::1:80",
                          "no-such-host.invalid:80", longName.c_str()}) {
    EXPECT_EQ(ncclSocketGetAddrFromString(&a, bad), ncclInvalidArgument) << bad;
  }
  EXPECT_EQ(ncclSocketGetAddrFromString(&a, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(LogCapture::contains("expected ip:port", NCCL_LOG_WARN)) << LogCapture::all();
}

// A listener on 127.0.0.1 with an ephemeral port.
struct Listener {
  struct ncclSocket sock;
  union ncclSocketAddress addr;
  explicit Listener(uint64_t magic = railnetSocketMagic(), ncclSocketType type = ncclSocketTypeNetSocket) {
    union ncclSocketAddress a;
    ncclSocketGetAddrFromString(&a, "127.0.0.1:0");
    EXPECT_EQ(ncclSocketInit(&sock, &a, magic, type, nullptr, 1), ncclSuccess);
    EXPECT_EQ(ncclSocketListen(&sock), ncclSuccess);
    EXPECT_EQ(ncclSocketGetAddr(&sock, &addr), ncclSuccess);
  }
  ~Listener() { ncclSocketClose(&sock); }
};

// A raw TCP client that sends `bytes` and then either closes or stays connected.
int rawClient(const union ncclSocketAddress& to, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (connect(fd, &to.sa, sizeof(to.sin)) != 0) {
    close(fd);
    return -1;
  }
  if (!bytes.empty() && write(fd, bytes.data(), bytes.size()) != (ssize_t)bytes.size()) {
    close(fd);
    return -1;
  }
  return fd;
}

// Accept until a ready peer arrives or the deadline passes.
bool acceptReady(Listener& l, struct ncclSocket* out, int ms) {
  memset(out, 0, sizeof(*out));
  out->fd = out->acceptFd = -1;
  long long deadline = netNowNs() + ms * 1000000LL;
  while (netNowNs() < deadline) {
    if (ncclSocketAccept(out, &l.sock) != ncclSuccess) return false;
    int ready = 0;
    if (ncclSocketReady(out, &ready) != ncclSuccess) return false;
    if (ready) return true;
    usleep(1000);
  }
  return false;
}

// Vectored non-blocking progress: bytes move in order across buffers (an empty one
// included), a short transfer stops the call with the iovecs consumed up to where it
// stopped, and the peer's close is reported as closed, not as an error.
TEST(SocketProgressV, MovesBuffersInOrderAcrossShortTransfers) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int small = 4096;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  struct ncclSocket tx, rx;
  memset(&tx, 0, sizeof(tx));
  memset(&rx, 0, sizeof(rx));
  tx.fd = sv[0];
  rx.fd = sv[1];
  std::vector<char> a(5), b(0), c(300000);
  for (size_t i = 0; i < a.size(); i++) a[i] = (char)(i + 1);
  for (size_t i = 0; i < c.size(); i++) c[i] = (char)(i * 31 + 7);
  std::vector<char> ra(5), rc(300000);
  struct iovec sIov[3] = {{a.data(), a.size()}, {b.data(), 0}, {c.data(), c.size()}};
  struct iovec rIov[2] = {{ra.data(), ra.size()}, {rc.data(), rc.size()}};
  struct iovec* sp = sIov;
  struct iovec* rp = rIov;
  int sn = 3, rn = 2;
  size_t sent = 0, got = 0;
  int shortSends = 0;
  for (int round = 0; round < 100000 && got < 300005; round++) {
    struct railnetSocketIo io = {};
    if (sent < 300005) {
      ASSERT_EQ(railnetSocketProgressV(NCCL_SOCKET_SEND, &tx, sp, sn, &io), ncclSuccess);
      ASSERT_EQ(io.closed, 0);
      EXPECT_EQ(io.zcSends, 0);
      sent += io.moved;
      if (sent < 300005 && io.moved > 0) shortSends++;
      // the iovecs still to send start exactly where the bytes stopped
      while (sn > 0 && sp[0].iov_len == 0) sp++, sn--;
      if (sn > 0) {
        char* expect = sent < 5 ? a.data() + sent : c.data() + (sent - 5);
        ASSERT_EQ(sp[0].iov_base, (void*)expect);
      }
    }
    ASSERT_EQ(railnetSocketProgressV(NCCL_SOCKET_RECV, &rx, rp, rn, &io), ncclSuccess);
    ASSERT_EQ(io.closed, 0);
    got += io.moved;
    while (rn > 0 && rp[0].iov_len == 0) rp++, rn--;
  }
  ASSERT_EQ(sent, 300005u);
  ASSERT_EQ(got, 300005u);
  EXPECT_GT(shortSends, 0) << "a 4 KiB send buffer must have cut the 300 kB send short";
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rc, c);
  // nothing left to read: no bytes, not closed; then the peer closes: closed
  char x;
  struct iovec one = {&x, 1};
  struct railnetSocketIo io = {};
  ASSERT_EQ(railnetSocketProgressV(NCCL_SOCKET_RECV, &rx, &one, 1, &io), ncclSuccess);
  EXPECT_EQ(io.moved, 0u);
  EXPECT_EQ(io.closed, 0);
  close(sv[0]);
  ASSERT_EQ(railnetSocketProgressV(NCCL_SOCKET_RECV, &rx, &one, 1, &io), ncclSuccess);
  EXPECT_EQ(io.closed, 1);
  close(sv[1]);
}

// MSG_ZEROCOPY over TCP on loopback: every send that took it gets one completion id, in
// order from 0; the completions come back from the error queue covering all of them, and
// say the kernel copied (loopback always does).
TEST(SocketProgressV, ZeroCopySendsAreCompletedFromTheErrorQueue) {
  Listener l;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(connect(fd, &l.addr.sa, sizeof(l.addr.sin)), 0);
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0) {
    close(fd);
    GTEST_SKIP() << "SKIP: no SO_ZEROCOPY on this kernel";
  }
  int acc = accept(l.sock.fd, nullptr, nullptr);
  ASSERT_GE(acc, 0);
  struct ncclSocket tx;
  memset(&tx, 0, sizeof(tx));
  tx.fd = fd;
  std::vector<char> buf(1 << 20, 'z'), sink(1 << 20);
  int zcSends = 0;
  for (int i = 0; i < 8; i++) {
    struct iovec iov = {buf.data(), buf.size()};
    size_t sent = 0;
    while (sent < buf.size()) {
      struct railnetSocketIo io = {};
      io.zerocopy = 1;
      ASSERT_EQ(railnetSocketProgressV(NCCL_SOCKET_SEND, &tx, &iov, 1, &io), ncclSuccess);
      ASSERT_EQ(io.zerocopy, 1) << "refused (ENOBUFS): RLIMIT_MEMLOCK too small for this test";
      sent += io.moved;
      zcSends += io.zcSends;
      ssize_t n;
      while ((n = recv(acc, sink.data(), sink.size(), MSG_DONTWAIT)) > 0) {
      }
    }
  }
  ASSERT_GT(zcSends, 0);
  struct Seen {
    uint32_t next = 0;
    int ranges = 0, copied = 0, inOrder = 1;
  } seen;
  auto done = [](void* arg, uint32_t first, uint32_t last, int copied) {
    Seen* s = (Seen*)arg;
    if (first != s->next) s->inOrder = 0;
    s->next = last + 1;
    s->ranges++;
    s->copied |= copied;
  };
  // completions come once the receiver took the bytes: wait for them, bounded
  for (int i = 0; i < 5000 && seen.next < (uint32_t)zcSends; i++) {
    struct pollfd p = {fd, 0, 0};
    poll(&p, 1, 10);
    railnetSocketZcReap(&tx, done, &seen);
    while (recv(acc, sink.data(), sink.size(), MSG_DONTWAIT) > 0) {
    }
  }
  EXPECT_EQ(seen.next, (uint32_t)zcSends);
  EXPECT_EQ(seen.inOrder, 1);
  EXPECT_GT(seen.ranges, 0);
  EXPECT_EQ(seen.copied, 1) << "loopback copies MSG_ZEROCOPY sends";
  close(acc);
  close(fd);
}

TEST(SocketAccept, StrayClientsAreDroppedAndRealPeerAccepted) {
  ScopedEnv env;
  env.set("RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC", "300");
  LogCapture log;
  Listener l;
  // 1. random bytes, 2. wrong magic, 3. nothing then close, 4. nothing and stays open,
  // 5. right magic, wrong socket type
  std::string random(64, '\0');
  for (size_t i = 0; i < random.size(); i++) random[i] = (char)(i * 73 + 5);
  uint64_t wrongMagic = 0x1122334455667788ULL, magic = railnetSocketMagic();
  int wrongType = ncclSocketTypeBootstrap;
  std::string wrongTypeMsg(reinterpret_cast<char*>(&magic), 8);
  wrongTypeMsg += std::string(reinterpret_cast<char*>(&wrongType), 4);
  std::vector<int> fds;
  fds.push_back(rawClient(l.addr, random));
  fds.push_back(rawClient(l.addr, std::string(reinterpret_cast<char*>(&wrongMagic), 8)));
  int closing = rawClient(l.addr, "");
  close(closing);
  fds.push_back(rawClient(l.addr, ""));  // silent
  fds.push_back(rawClient(l.addr, wrongTypeMsg));
  for (int fd : fds) ASSERT_GE(fd, 0);

  // the real peer connects last
  struct ncclSocket peer;
  std::thread t([&] {
    usleep(100000);
    ncclSocketInit(&peer, &l.addr, magic, ncclSocketTypeNetSocket, nullptr, 0);
    ncclSocketConnect(&peer);
    int v = 42;
    ncclSocketSend(&peer, &v, sizeof(v));
  });
  struct ncclSocket acc;
  bool ok = acceptReady(l, &acc, 10000);
  t.join();
  ASSERT_TRUE(ok) << LogCapture::all();
  int v = 0;
  ASSERT_EQ(ncclSocketRecv(&acc, &v, sizeof(v)), ncclSuccess);
  EXPECT_EQ(v, 42);
  EXPECT_TRUE(LogCapture::contains("wrong handshake magic 0x1122334455667788", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("closed before its handshake")) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("handshake bytes in 300 ms", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("socket type 1", NCCL_LOG_WARN)) << LogCapture::all();
  ncclSocketClose(&acc);
  ncclSocketClose(&peer);
  for (int fd : fds) close(fd);
}

TEST(SocketConnect, RefusedEndsWithinRetryBudgetWithTheFix) {
  ScopedEnv env;
  env.set("NCCL_SOCKET_RETRY_CNT", "3");
  env.set("NCCL_SOCKET_RETRY_SLEEP_MSEC", "20");
  env.set("NCCL_SOCKET_IFNAME", "lo");
  LogCapture log;
  union ncclSocketAddress closed;
  {
    Listener l;  // find a port, then close it: nobody listens there any more
    closed = l.addr;
  }
  struct ncclSocket s;
  ASSERT_EQ(ncclSocketInit(&s, &closed, railnetSocketMagic(), ncclSocketTypeNetSocket, nullptr, 0), ncclSuccess);
  long long t0 = netNowNs();
  EXPECT_EQ(ncclSocketConnect(&s), ncclRemoteError);
  double secs = (netNowNs() - t0) / 1e9;
  EXPECT_LT(secs, 2.0);
  EXPECT_GE(secs, 0.1);  // 20 + 40 + 60 ms of sleeps
  EXPECT_EQ(s.errorRetries, 4);
  EXPECT_TRUE(LogCapture::contains("Connection refused after 4 attempts", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("via interface lo (local address 127.0.0.1)", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("NCCL_SOCKET_IFNAME=", NCCL_LOG_WARN));
  EXPECT_TRUE(LogCapture::contains("retrying (2/3) after 40 msec")) << LogCapture::all();
  ncclSocketClose(&s);
}

// A connect with every file descriptor of RLIMIT_NOFILE in use fails at once, with a WARN
// that names the limit, what a comm takes and how to raise it.
TEST(SocketConnect, OutOfFileDescriptorsSaysSoAndHowToRaiseTheLimit) {
  ScopedEnv env;
  env.set("NCCL_SOCKET_IFNAME", "lo");
  Listener l;
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fill;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fill.push_back(fd);
  LogCapture log;
  struct ncclSocket s;
  ncclResult_t init = ncclSocketInit(&s, &l.addr, railnetSocketMagic(), ncclSocketTypeNetSocket, nullptr, 0);
  ncclResult_t r = init == ncclSuccess ? ncclSocketConnect(&s) : init;
  for (int fd : fill) close(fd);
  setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_EQ(r, ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("Too many open files: this process has its RLIMIT_NOFILE of 64 file descriptors",
                                   NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("1 + NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD", NCCL_LOG_WARN));
  EXPECT_TRUE(LogCapture::contains("Fix: raise it before the job starts (ulimit -n", NCCL_LOG_WARN));
  ncclSocketClose(&s);
}

TEST(SocketConnect, AsyncConnectNeverBlocks) {
  ScopedEnv env;
  // a call that slept would take the whole 2 s retry sleep; preemption on a loaded
  // machine stays far below that
  env.set("NCCL_SOCKET_RETRY_CNT", "1");
  env.set("NCCL_SOCKET_RETRY_SLEEP_MSEC", "2000");
  union ncclSocketAddress closed;
  {
    Listener l;
    closed = l.addr;
  }
  struct ncclSocket s;
  ASSERT_EQ(ncclSocketInit(&s, &closed, railnetSocketMagic(), ncclSocketTypeNetSocket, nullptr, 1), ncclSuccess);
  ASSERT_EQ(ncclSocketConnect(&s), ncclSuccess);
  long long worst = 0, t0 = netNowNs();
  ncclResult_t r = ncclSuccess;
  int ready = 0;
  while (r == ncclSuccess && netNowNs() - t0 < 10000000000LL) {
    long long c0 = netNowNs();
    r = ncclSocketReady(&s, &ready);
    worst = std::max(worst, netNowNs() - c0);
  }
  EXPECT_EQ(r, ncclRemoteError);
  EXPECT_LT(worst, 1000000000LL) << "a call of an async connect slept";
  EXPECT_GE(netNowNs() - t0, 1900000000LL) << "the retry did wait its sleep between calls";
  ncclSocketClose(&s);
}

}  // namespace
