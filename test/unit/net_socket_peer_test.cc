// The Socket transport against hand-written malicious peers on loopback: whatever a peer
// (or anything that reaches the listen port) sends, the transport answers with a WARN that
// names the peer and an error (or drops the connection and keeps listening), never with a
// write outside the posted buffer and never with a hang.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <string>
#include <vector>
#include "net_pair.h"
#include "test_util.h"

extern "C" {
#include "railnet.h"
#include "socket.h"
#include "net_socket.h"
}

namespace {

const ncclNet_t* net() { return railnetGetNet("socket"); }

// The Socket transport's handle (net_socket.c); the test checks the magic.
struct HandleView {
  uint64_t handleMagic, socketMagic;
  union ncclSocketAddress addr;
  int32_t nSocks, nThreads;
};

struct Record {
  uint64_t size;
  int32_t tag, pad;
};

struct NetSocketPeer : ::testing::Test {
  ScopedEnv env;
  void* ctx = nullptr;
  void* lc = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  HandleView h;
  std::vector<int> fds;
  void SetUp() override {
    env.set("NCCL_SOCKET_IFNAME", "lo");
    env.set("NCCL_SOCKET_NTHREADS", "0");  // one control socket: index 0 is the control socket
    env.set("RAILNET_SOCKET_TIMEOUT_MSEC", "3000");
    env.set("RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC", "500");
    ASSERT_EQ(net()->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
    ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
    memcpy(&h, handle, sizeof(h));
    ASSERT_EQ(h.handleMagic, 0x4b434f534c494152ULL) << "handle layout changed";
    ASSERT_EQ(h.nSocks, 0);
  }
  void TearDown() override {
    for (int fd : fds) close(fd);
    if (lc) net()->closeListen(lc);
    if (ctx) net()->finalize(ctx);
  }
  // A raw TCP client of the listen port that sends `bytes`.
  int raw(const std::string& bytes) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(fd, &h.addr.sa, sizeof(h.addr.sin)), 0);
    if (!bytes.empty()) {
      EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), (ssize_t)bytes.size());
    }
    fds.push_back(fd);
    return fd;
  }
  static std::string bytesOf(const void* p, size_t n) { return std::string((const char*)p, n); }
  std::string hello(int32_t idx, uint64_t magic = 0, int type = ncclSocketTypeNetSocket) {
    if (magic == 0) magic = h.socketMagic;
    return bytesOf(&magic, 8) + bytesOf(&type, 4) + bytesOf(&idx, 4);
  }
  // Calls accept until a comm comes back or ms passed.
  void* acceptFor(int ms) {
    void* rc = nullptr;
    ncclNetDeviceHandle_t* dc;
    long long deadline = netNowNs() + ms * 1000000LL;
    while (rc == nullptr && netNowNs() < deadline) {
      EXPECT_EQ(net()->accept(lc, &rc, &dc), ncclSuccess);
      usleep(1000);
    }
    return rc;
  }
  // Has the transport closed this raw connection?
  static bool closedByServer(int fd, int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    long long deadline = netNowNs() + ms * 1000000LL;
    while (netNowNs() < deadline) {
      char c;
      ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
      poll(&p, 1, 10);
    }
    return false;
  }
  // A peer with a correct handshake (index 0: the control socket) and an accepted comm.
  void* peerComm(int* fd) {
    *fd = raw(hello(0));
    return acceptFor(5000);
  }
  // Posts one receive of `size` bytes (tag), lets `test` run until done or error; returns
  // the result and the time it took.
  ncclResult_t recvOnce(void* rc, std::vector<char>& buf, int tag, double* secs) {
    void* d = buf.data();
    size_t sz = buf.size();
    void* req = nullptr;
    EXPECT_EQ(net()->irecv(rc, 1, &d, &sz, &tag, nullptr, nullptr, &req), ncclSuccess);
    long long t0 = netNowNs();
    int done = 0, size = 0;
    ncclResult_t r = ncclSuccess;
    while (r == ncclSuccess && !done && netNowNs() - t0 < 10000000000LL) r = net()->test(req, &done, &size);
    *secs = (netNowNs() - t0) / 1e9;
    return r;
  }
};

// A connection that announces a socket index outside 0..nSocks, or one already taken, is
// dropped with a WARN that names it; the listener keeps going and the real peer is accepted.
TEST_F(NetSocketPeer, OutOfRangeOrDuplicateSocketIndexIsDroppedAndNamed) {
  LogCapture log;
  int bad1 = raw(hello(7));
  int bad2 = raw(hello(-1));
  int bad3 = raw(hello(0x7fffffff));
  EXPECT_EQ(acceptFor(300), nullptr);
  EXPECT_TRUE(closedByServer(bad1, 2000));
  EXPECT_TRUE(closedByServer(bad2, 2000));
  EXPECT_TRUE(closedByServer(bad3, 2000));
  EXPECT_TRUE(LogCapture::contains("announced socket index 7, expected an unused one of 0..0", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("announced socket index -1", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("announced socket index 2147483647", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("connection from 127.0.0.1<", NCCL_LOG_WARN)) << LogCapture::all();
  int fd;
  void* rc = peerComm(&fd);
  ASSERT_NE(rc, nullptr) << LogCapture::all();
  net()->closeRecv(rc);
}

// Wrong magic, wrong socket type, a handshake cut short and a peer that closes between the
// handshake and its socket index: each is dropped (the bad ones with a WARN naming the
// peer), none blocks the listener.
TEST_F(NetSocketPeer, BadOrTruncatedHandshakesAreDropped) {
  LogCapture log;
  int wrongMagic = raw(hello(0, 0x1122334455667788ULL));
  int wrongType = raw(hello(0, 0, ncclSocketTypeBootstrap));
  int cut = raw(hello(0).substr(0, 5));
  shutdown(cut, SHUT_WR);
  int noIdx = raw(hello(0).substr(0, 12));  // handshake done, then closes before its index
  shutdown(noIdx, SHUT_WR);
  int halfIdx = raw(hello(0).substr(0, 14));  // two bytes of the index, then silence
  long long t0 = netNowNs();
  EXPECT_EQ(acceptFor(300), nullptr);
  for (int fd : {wrongMagic, wrongType, cut, noIdx}) EXPECT_TRUE(closedByServer(fd, 3000)) << fd;
  EXPECT_TRUE(LogCapture::contains("wrong handshake magic 0x1122334455667788", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("socket type 1", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("closed before its handshake")) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("closed before it said which socket it is")) << LogCapture::all();
  // the silent half-index peer holds one of the listener's slots until it is gone or its accept
  // timeout passed (ASilentPeerAfterTheHandshakeDoesNotHoldTheRealPeer): close it, as a dead
  // peer's kernel would
  close(halfIdx);
  fds.erase(std::find(fds.begin(), fds.end(), halfIdx));
  int fd;
  void* rc = peerComm(&fd);
  ASSERT_NE(rc, nullptr) << LogCapture::all();
  EXPECT_LT((netNowNs() - t0) / 1e9, 8.0);
  net()->closeRecv(rc);
}

// A peer that does the handshake, sends half its socket index and goes silent (a stranger, or
// a host that died mid-connect): the real peer queued behind it is accepted at once (the
// listener reads the index of up to 8 connections at once), and the stranger is dropped
// RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC (500 here) after it connected, with a WARN, while accept
// goes on being called. Before, it held accept for its bound (for ever before that).
TEST_F(NetSocketPeer, ASilentPeerAfterTheHandshakeDoesNotHoldTheRealPeer) {
  LogCapture log;
  int halfIdx = raw(hello(0).substr(0, 14));
  raw(hello(0));  // the real peer, behind it in the listen queue
  void* rc = acceptFor(10000);
  ASSERT_NE(rc, nullptr) << LogCapture::all();
  EXPECT_FALSE(LogCapture::contains("did not say which socket it is", NCCL_LOG_WARN))
      << "the real peer waited for the stranger's bound\n" << LogCapture::all();
  EXPECT_EQ(acceptFor(2000), nullptr);
  EXPECT_TRUE(closedByServer(halfIdx, 1000));
  EXPECT_TRUE(LogCapture::contains("did not say which socket it is within 500 ms of connecting", NCCL_LOG_WARN))
      << LogCapture::all();
  net()->closeRecv(rc);
}

// More silent half-index strangers than the listener reads at once (10 > 8) in front of the
// real peer: they are dropped at their bound, and the real peer behind them is accepted.
TEST_F(NetSocketPeer, MoreSilentPeersThanSlotsAreDroppedAndTheRealPeerIsAccepted) {
  LogCapture log;
  std::vector<int> silent;
  for (int k = 0; k < 10; k++) silent.push_back(raw(hello(0).substr(0, 14)));
  raw(hello(0));
  void* rc = acceptFor(10000);
  ASSERT_NE(rc, nullptr) << LogCapture::all();
  int dropped = 0;
  for (auto& l : LogCapture::lines())
    dropped += l.level == NCCL_LOG_WARN && l.msg.find("did not say which socket it is") != std::string::npos;
  EXPECT_GE(dropped, 2) << "the real peer got in before the 8 slots were freed?\n" << LogCapture::all();
  net()->closeRecv(rc);
}

// Control records announcing more than the posted buffer (larger, "negative", the largest
// 64-bit value) fail the receive with ncclInvalidUsage and a WARN naming the peer; not one
// byte of the buffer is written.
TEST_F(NetSocketPeer, OversizedOrNegativeRecordSizeFailsWithoutWriting) {
  for (uint64_t size : {(uint64_t)1001, (uint64_t)1 << 63, ~(uint64_t)0, (uint64_t)INT32_MAX + 1}) {
    LogCapture log;
    int fd;
    void* rc = peerComm(&fd);
    ASSERT_NE(rc, nullptr);
    Record rec = {size, 0, 0};
    std::string msg = bytesOf(&rec, sizeof(rec)) + std::string(200, 'x');
    ASSERT_EQ(send(fd, msg.data(), msg.size(), MSG_NOSIGNAL), (ssize_t)msg.size());
    std::vector<char> buf(1000, 0);
    double secs;
    EXPECT_EQ(recvOnce(rc, buf, 0, &secs), ncclInvalidUsage) << size;
    EXPECT_TRUE(LogCapture::contains("sent a message of " + std::to_string(size) + " bytes but the receive buffer holds 1000",
                                     NCCL_LOG_WARN))
        << LogCapture::all();
    EXPECT_TRUE(LogCapture::contains("peer 127.0.0.1<", NCCL_LOG_WARN)) << LogCapture::all();
    EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](char c) { return c == 0; })) << "written: size " << size;
    net()->closeRecv(rc);
  }
}

// A record with another tag than the posted receive: ncclInvalidUsage, WARN with both tags.
TEST_F(NetSocketPeer, WrongTagFails) {
  LogCapture log;
  int fd;
  void* rc = peerComm(&fd);
  ASSERT_NE(rc, nullptr);
  Record rec = {10, 99, 0};
  std::string msg = bytesOf(&rec, sizeof(rec)) + "0123456789";
  ASSERT_EQ(send(fd, msg.data(), msg.size(), MSG_NOSIGNAL), (ssize_t)msg.size());
  std::vector<char> buf(100, 0);
  double secs;
  EXPECT_EQ(recvOnce(rc, buf, 5, &secs), ncclInvalidUsage);
  EXPECT_TRUE(LogCapture::contains("peer 127.0.0.1<", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("tag 99, the posted receive expects tag 5", NCCL_LOG_WARN)) << LogCapture::all();
  net()->closeRecv(rc);
}

// A peer that closes in the middle of a record, of an inline payload, or of a payload on
// the control socket: the receive fails with ncclRemoteError within a bounded time (no
// hang) and a WARN naming the peer; the comm stays failed.
TEST_F(NetSocketPeer, PeerClosingMidRecordOrPayloadFailsPromptly) {
  Record inl = {50, 0, 0}, big = {5000, 0, 0};
  std::vector<std::string> cuts = {
      bytesOf(&inl, 9),                                   // half a record
      bytesOf(&inl, sizeof(inl)) + std::string(20, 'x'),  // 20 of 50 inline bytes
      bytesOf(&big, sizeof(big)) + std::string(3000, 'y'),  // 3000 of 5000 payload bytes
  };
  for (auto& cut : cuts) {
    LogCapture log;
    int fd;
    void* rc = peerComm(&fd);
    ASSERT_NE(rc, nullptr);
    ASSERT_EQ(send(fd, cut.data(), cut.size(), MSG_NOSIGNAL), (ssize_t)cut.size());
    shutdown(fd, SHUT_WR);
    std::vector<char> buf(8000, 0);
    double secs;
    EXPECT_EQ(recvOnce(rc, buf, 0, &secs), ncclRemoteError) << cut.size() << " bytes";
    EXPECT_LT(secs, 5.0);
    EXPECT_TRUE(LogCapture::contains("peer 127.0.0.1<", NCCL_LOG_WARN)) << LogCapture::all();
    char again[10];
    void* d = again;
    size_t sz = sizeof(again);
    int tag = 0;
    void* req = (void*)1;
    EXPECT_EQ(net()->irecv(rc, 1, &d, &sz, &tag, nullptr, nullptr, &req), ncclRemoteError) << "stays failed";
    EXPECT_EQ(req, nullptr);
    net()->closeRecv(rc);
  }
}

// The handle check connect() runs: garbage, a foreign magic, a bad family, port 0, socket
// and thread counts out of range, at any alignment; each refused before any connection.
TEST_F(NetSocketPeer, HandleCheckRefusesBadHandles) {
  LogCapture log;
  EXPECT_EQ(railnetSocketCheckHandle(handle), ncclSuccess);
  auto variant = [&](auto change) {
    alignas(8) char buf[NCCL_NET_HANDLE_MAXSIZE + 1];
    HandleView v = h;
    change(v);
    memset(buf, 0, sizeof(buf));
    memcpy(buf + 1, &v, sizeof(v));  // odd address: NCCL's handles are byte arrays
    return railnetSocketCheckHandle(buf + 1);
  };
  EXPECT_EQ(variant([](HandleView&) {}), ncclSuccess);
  EXPECT_EQ(variant([](HandleView& v) { v.handleMagic ^= 1; }), ncclInvalidArgument);
  EXPECT_EQ(variant([](HandleView& v) { v.addr.sa.sa_family = AF_UNIX; }), ncclInvalidArgument);
  EXPECT_EQ(variant([](HandleView& v) { v.addr.sin.sin_port = 0; }), ncclInvalidArgument);
  EXPECT_EQ(variant([](HandleView& v) { v.nSocks = -1; }), ncclInvalidArgument);
  EXPECT_EQ(variant([](HandleView& v) { v.nSocks = 65; v.nThreads = 1; }), ncclInvalidArgument);
  EXPECT_EQ(variant([](HandleView& v) { v.nSocks = 4; v.nThreads = 0; }), ncclInvalidArgument);
  EXPECT_EQ(variant([](HandleView& v) { v.nSocks = 5; v.nThreads = 2; }), ncclInvalidArgument);
  EXPECT_EQ(variant([](HandleView& v) { v.nThreads = 17; v.nSocks = 17; }), ncclInvalidArgument);
  EXPECT_TRUE(LogCapture::contains("connect handle is invalid", NCCL_LOG_WARN)) << LogCapture::all();
}

}  // namespace
