// Payloads on the control socket (RAILNET_SOCKET_CTRL_PAYLOAD): with data sockets, a message
// larger than NCCL_SOCKET_INLINE and at most that size follows its record on the control
// socket while that socket keeps up; once it is full, new messages take the data sockets
// (NCCL's layout) until it drains. The receiver offers it in its handle; a handle without the
// offer (an older railnet) gets NCCL's layout, and a record flagged without the offer fails
// the receive with a WARN. And the chunk size a receiver states in its handle
// (RAILNET_SOCKET_MIN_TASKSIZE), by which a sender that flags its records cuts; the helpers'
// receive path. Both ends in this process, on loopback, 2 x 2 helper threads.
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/sockios.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <functional>
#include <vector>
#include "net_pair.h"
#include "test_util.h"

extern "C" {
#include "../../src/transport/net_socket_types.h"
#include "../../src/transport/net_socket_wire.h"
#include "../../src/transport/net_socket_balance.h"
#include "railnet.h"
}

namespace {

const ncclNet_t* net() { return railnetGetNet("socket"); }

// Chunks per data socket of a comm: [s] = tasks posted on socket s so far.
std::vector<uint32_t> tails(socketComm* c) {
  std::vector<uint32_t> t;
  for (int s = 0; s < c->nSocks; s++) t.push_back(c->queues[s].tail);
  return t;
}

struct NetSocketCtrl : ::testing::Test {
  ScopedEnv env;
  void* ctx = nullptr;
  void* lc = nullptr;
  void* sc = nullptr;
  void* rc = nullptr;
  std::vector<std::vector<char>> out, in;  // live until the comms are closed; a byte more than the
  std::vector<size_t> outSize;              // message (never an empty vector's NULL data())
  void SetUp() override {
    env.set("NCCL_SOCKET_IFNAME", "lo");
    env.set("NCCL_SOCKET_NTHREADS", "2");
    env.set("NCCL_NSOCKS_PERTHREAD", "2");
    for (const char* v : {"RAILNET_SOCKET_CTRL_PAYLOAD", "NCCL_SOCKET_INLINE", "NCCL_SOCKET_MIN_TASKSIZE",
                          "RAILNET_SOCKET_MIN_TASKSIZE", "RAILNET_SOCKET_BALANCE", "NCCL_SOCKET_SNDBUF",
                          "NCCL_SOCKET_RCVBUF"})
      env.unset(v);  // the defaults: the counts below depend on them
    ASSERT_EQ(net()->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
  }
  // offer: leave the listener's handle as it is, or clear its offer of payloads on the
  // control socket (an older listener's); between listen and connect, between() may change
  // the connector's environment
  uint32_t clearFlags = 0;  // handle flags the connector does not see (whatever clearOffer says)
  void connect(bool clearOffer, const std::function<void()>& between = nullptr) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
    if (clearOffer || clearFlags) {
      uint32_t flags;
      memcpy(&flags, handle + offsetof(socketHandle, flags), sizeof(flags));
      flags &= ~(clearOffer ? RAILNET_SOCKET_HANDLE_CTRL_PAYLOAD : 0u) & ~clearFlags;
      memcpy(handle + offsetof(socketHandle, flags), &flags, sizeof(flags));
    }
    if (between) between();
    ASSERT_TRUE(netConnectPair(net(), ctx, 0, handle, lc, &sc, &rc));
  }
  void closeComms() {
    if (sc) net()->closeSend(sc);
    if (rc) net()->closeRecv(rc);
    if (lc) net()->closeListen(lc);
    sc = rc = lc = nullptr;
  }
  void TearDown() override {
    closeComms();
    if (ctx) net()->finalize(ctx);
  }
  socketComm* S() { return (socketComm*)sc; }
  socketComm* R() { return (socketComm*)rc; }
  void* isend(size_t size, int k) {
    out.emplace_back(size + 1, (char)(0x20 + k % 90));
    for (size_t i = 0; i < size; i++)  // by position too: chunks swapped or misplaced do not compare equal
      out.back()[i] = (char)(0x20 + (k * 31 + i / 4096) % 90);
    outSize.push_back(size);
    void* req = nullptr;
    long long dl = netNowNs() + 30000000000LL;
    while (req == nullptr && netNowNs() < dl)
      EXPECT_EQ(net()->isend(sc, out.back().data(), size, k, nullptr, nullptr, &req), ncclSuccess);
    return req;
  }
  void* irecv(size_t size, int k) {
    in.emplace_back(size + 1, 0);
    void* data = in.back().data();
    int tag = k;
    void* mh = nullptr;
    void* req = nullptr;
    EXPECT_EQ(net()->irecv(rc, 1, &data, &size, &tag, &mh, nullptr, &req), ncclSuccess);
    return req;
  }
  // Connects with socket sets on, the sender's data socket 0 64 MiB behind and measured at
  // 1 KB/s (1e-6 bytes per ns).
  void connectBalancedWithSocket0Behind() {
    connect(false);
    ASSERT_EQ(S()->balance, 1);
    ASSERT_EQ(R()->balance, 1);
    S()->queues[0].planned += 64u << 20;
    S()->queues[0].rate = 1e-6;
    S()->queues[0].ratedNs = railnetClockNs();
  }
  // `count` messages of `size` bytes, every byte checked (finish); *chunks: the tasks each data
  // socket of the sender got, which must be the receiver's too (both ends cut alike).
  void exchange(size_t size, int count, std::vector<uint32_t>* chunks) {
    std::vector<void*> sends, recvs;
    size_t first = out.size();
    for (int k = 0; k < count; k++) {
      sends.push_back(isend(size, k));
      recvs.push_back(irecv(size, k));
    }
    ASSERT_NO_FATAL_FAILURE(finish(sends, recvs, first));
    *chunks = tails(S());
    ASSERT_EQ(*chunks, tails(R())) << "both ends placed the chunks alike";
  }
  // Drives the sends and receives until all are done; checks every size and byte.
  void finish(std::vector<void*> sends, std::vector<void*> recvs, size_t firstIn) {
    long long dl = netNowNs() + 60000000000LL;
    size_t left = recvs.size();  // sends already done are nullptr
    for (void* r : sends) left += r != nullptr;
    std::vector<int> sizes(recvs.size(), -1);
    while (left > 0 && netNowNs() < dl) {
      for (auto& r : sends) {
        int done = 0;
        if (r == nullptr) continue;
        ASSERT_EQ(net()->test(r, &done, nullptr), ncclSuccess);
        if (done) r = nullptr, left--;
      }
      for (size_t i = 0; i < recvs.size(); i++) {
        int done = 0;
        if (recvs[i] == nullptr) continue;
        ASSERT_EQ(net()->test(recvs[i], &done, &sizes[i]), ncclSuccess);
        if (done) recvs[i] = nullptr, left--;
      }
    }
    ASSERT_EQ(left, 0u) << "requests not done in 60 s";
    for (size_t i = 0; i < sizes.size(); i++) {  // receive buffers may be larger than the messages
      size_t n = outSize[firstIn + i];
      ASSERT_EQ((size_t)sizes[i], n) << "message " << i;
      ASSERT_EQ(memcmp(in[firstIn + i].data(), out[firstIn + i].data(), n), 0) << "message " << i << " garbled";
    }
  }
  // Drives send s and receive r until the receive fails or is done (30 s at most): what
  // the receive's test() returned last (ncclSuccess: done, or still going).
  ncclResult_t receiveFailure(void* s, void* r) {
    ncclResult_t res = ncclSuccess;
    long long dl = netNowNs() + 30000000000LL;
    int rdone = 0, sdone = 0;
    while (res == ncclSuccess && !rdone && netNowNs() < dl) {
      if (!sdone && net()->test(s, &sdone, nullptr) != ncclSuccess) sdone = 1;  // the sender's fate is not asserted
      res = net()->test(r, &rdone, nullptr);
    }
    return res;
  }
  uint32_t tasksPosted() {
    uint32_t n = 0;
    for (int s = 0; s < S()->nSocks; s++) n += S()->queues[s].tail;
    return n;
  }
};

// Small socket buffers fill the control socket while the receiver does not read: the next
// RAILNET_SOCKET_CTRL_SPILL payloads take the data sockets, every message arrives whole and
// in order, and after them payloads go on the control socket again.
TEST_F(NetSocketCtrl, AFullControlSocketSendsTheNextPayloadsOnTheDataSockets) {
  env.set("NCCL_SOCKET_SNDBUF", "4096");
  env.set("NCCL_SOCKET_RCVBUF", "32768");
  connect(false);
  ASSERT_EQ(S()->ctrlMax, 65536u);
  std::vector<void*> sends;
  std::vector<size_t> finished;
  const size_t size = 16000;
  while (S()->ctrlSpill == 0 && sends.size() < 24) {  // at most 384 KB: the buffers hold far less
    sends.push_back(isend(size, (int)sends.size()));
    EXPECT_EQ(((socketRequest*)sends.back())->onCtrl, 1) << "posted while the control socket kept up";
    int done = 0;
    ASSERT_EQ(net()->test(sends.back(), &done, nullptr), ncclSuccess);
    if (done) finished.push_back(sends.size() - 1);
  }
  for (size_t k : finished) sends[k] = nullptr;  // done: not tested again
  ASSERT_EQ(S()->ctrlSpill, RAILNET_SOCKET_CTRL_SPILL) << "the control socket never filled";
  EXPECT_EQ(tasksPosted(), 0u);
  size_t full = sends.size();
  for (int k = 0; k < 8; k++) sends.push_back(isend(size, (int)sends.size()));
  for (size_t k = full; k < sends.size(); k++) EXPECT_EQ(((socketRequest*)sends[k])->onCtrl, 0) << "message " << k;
  std::vector<void*> recvs;
  for (size_t k = 0; k < sends.size(); k++) recvs.push_back(irecv(size, (int)k));
  finish(sends, recvs, 0);
  EXPECT_EQ(tasksPosted(), 8u) << "one chunk per message posted while the control socket was full";
  // one at a time, small enough for the buffers: each goes on the control socket exactly when
  // no spill is left, and one does within the spill's length
  bool back = false;
  for (int i = 0; i < RAILNET_SOCKET_CTRL_SPILL + 8 && !back; i++) {
    int k = (int)out.size();
    int spill = S()->ctrlSpill;
    void* s = isend(1000, k);
    back = ((socketRequest*)s)->onCtrl == 1;
    EXPECT_EQ(back, spill == 0) << "message " << k << " with " << spill << " to spill";
    finish({s}, {irecv(1000, k)}, (size_t)k);
  }
  EXPECT_TRUE(back) << "payloads never went on the control socket again";
}

// Whether this kernel paces loopback TCP by SO_MAX_PACING_RATE (its own pacing, Linux 4.13
// on; the first 10 segments of a connection go unpaced): after 16 segments, two small sends
// on a socket paced to 20 KB/s leave the second one's bytes unsent.
static bool kernelPacesLoopback() {
  int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), a = -1;
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  unsigned long long rate = 20000;
  char buf[2000] = {};
  int unsent = 0, one = 1, sent = 0;
  bool ok = l >= 0 && c >= 0 && bind(l, (struct sockaddr*)&sa, sizeof(sa)) == 0 && listen(l, 1) == 0 &&
            getsockname(l, (struct sockaddr*)&sa, &len) == 0 && connect(c, (struct sockaddr*)&sa, sizeof(sa)) == 0 &&
            (a = accept(l, nullptr, nullptr)) >= 0 &&
            setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0 &&
            setsockopt(c, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate)) == 0;
  for (int i = 0; ok && i < 18; i++) sent += send(c, buf, 100, 0) == 100;  // the unpaced start
  ok = ok && sent == 18 && send(c, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf) &&
       send(c, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf) && ioctl(c, SIOCOUTQNSD, &unsent) == 0 && unsent > 0;
  for (int fd : {a, c, l})
    if (fd >= 0) close(fd);
  return ok;
}

// The control socket's flow lags (paced by the kernel here, as a cloud NIC's per-flow rate
// limit would): a send with payloads that the socket took whole but could not put on the wire
// yet (unsent bytes) spills the next payloads to the data sockets, so records do not wait
// behind payloads on a slow flow.
TEST_F(NetSocketCtrl, ALaggingControlFlowSendsTheNextPayloadsOnTheDataSockets) {
  if (!kernelPacesLoopback()) GTEST_SKIP() << "SKIP: this kernel does not pace loopback TCP (SO_MAX_PACING_RATE)";
  connect(false);
  unsigned long long rate = 4000;  // bytes per second: a 2 KB message holds the flow for 0.5 s
  ASSERT_EQ(setsockopt(S()->ctrl.fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate)), 0);
  // one message at a time, each taken whole by the socket: after the connection's first 10
  // segments (unpaced), one leaves and the pacing holds the next one's bytes in the kernel
  // (unless this thread slept 0.5 s between the two: then the next pair)
  std::vector<void*> sends;
  for (int k = 0; k < 30 && S()->ctrlSpill == 0; k++) {
    sends.push_back(isend(2000, k));
    ASSERT_EQ(((socketRequest*)sends.back())->onCtrl, 1);
    int done = 0;
    ASSERT_EQ(net()->test(sends.back(), &done, nullptr), ncclSuccess);
    EXPECT_TRUE(done || ((socketRequest*)sends.back())->state == REQ_DATA) << "message " << k << " not taken whole";
    if (done) sends.back() = nullptr;
  }
  ASSERT_EQ(S()->ctrlSpill, RAILNET_SOCKET_CTRL_SPILL) << "the paced flow's unsent bytes went unnoticed";
  int n = (int)sends.size();
  sends.push_back(isend(2000, n));
  EXPECT_EQ(((socketRequest*)sends.back())->onCtrl, 0);
  std::vector<void*> recvs;
  for (int k = 0; k <= n; k++) recvs.push_back(irecv(2000, k));
  finish(sends, recvs, 0);
}

// Sizes around the inline size and RAILNET_SOCKET_CTRL_PAYLOAD: which socket each payload
// takes, and every byte.
TEST_F(NetSocketCtrl, PayloadsUpToTheLimitFollowTheirRecords) {
  connect(false);
  const size_t sizes[] = {0, 128, 129, 4096, 65536, 65537, 300000, 2u << 20};
  std::vector<void*> sends, recvs;
  for (int k = 0; k < 8; k++) {
    sends.push_back(isend(sizes[k], k));
    recvs.push_back(irecv(sizes[k] + 100, k));
  }
  for (int k = 0; k < 8; k++)
    EXPECT_EQ(((socketRequest*)sends[k])->onCtrl, sizes[k] > 128 && sizes[k] <= 65536) << sizes[k] << " bytes";
  finish(sends, recvs, 0);
  // chunks of at least RAILNET_SOCKET_MIN_TASKSIZE (256 KiB), stated by the receiver
  EXPECT_EQ(S()->minTask, 262144u);
  EXPECT_EQ(tasksPosted(), 1u + 2u + 4u) << "65537 bytes: one chunk; 300000: 256 KiB and the rest; 2 MiB: one "
                                            "chunk per data socket";
}

// A listener without the offer (an older railnet: zeros where the flags are): NCCL's layout.
TEST_F(NetSocketCtrl, AHandleWithoutTheOfferGetsNcclsLayout) {
  connect(true);
  EXPECT_EQ(S()->ctrlMax, 0u);
  std::vector<void*> sends, recvs;
  for (int k = 0; k < 8; k++) sends.push_back(isend(4096, k));
  for (int k = 0; k < 8; k++) recvs.push_back(irecv(4096, k));
  finish(sends, recvs, 0);
  EXPECT_EQ(tasksPosted(), 8u) << "every 4 KiB payload on a data socket";
}

// A receiver that did not offer a feature (RAILNET_SOCKET_CTRL_PAYLOAD=0,
// RAILNET_SOCKET_MIN_TASKSIZE=0 or RAILNET_SOCKET_BALANCE=0 at its listen) and a sender that
// flags its record for it anyway (a broken or foreign peer): the receive fails with a WARN,
// never reads the payload as the next record, cuts by a size nobody stated, nor takes chunks
// from a socket nobody agreed on.
TEST_F(NetSocketCtrl, AFlagTheReceiverDidNotOfferFailsTheReceive) {
  for (const char* var : {"RAILNET_SOCKET_CTRL_PAYLOAD", "RAILNET_SOCKET_MIN_TASKSIZE", "RAILNET_SOCKET_BALANCE"}) {
    const bool ctrlPayload = strcmp(var, "RAILNET_SOCKET_CTRL_PAYLOAD") == 0, first = strcmp(var, "RAILNET_SOCKET_BALANCE") == 0;
    env.set(var, "0");
    connect(false);
    ASSERT_EQ(ctrlPayload ? S()->ctrlMax : first ? (size_t)R()->balance : R()->statedTask, 0u) << var;
    if (ctrlPayload) S()->ctrlMax = 65536;  // the peer ignores the handle
    else if (first) S()->balance = 1;
    else S()->statedTask = 262144;
    LogCapture cap;
    size_t size = ctrlPayload ? 4096 : 300000;
    void* s = isend(size, 0);
    void* r = irecv(size, 0);
    EXPECT_EQ(receiveFailure(s, r), ncclRemoteError) << var;
    EXPECT_TRUE(LogCapture::contains("did not offer")) << LogCapture::all();
    closeComms();
    env.set(var, nullptr);
  }
}

// Other inline sizes: 0 (every non-empty payload is larger than inline) and one larger than
// RAILNET_SOCKET_CTRL_PAYLOAD (nothing can go on the control socket but inline payloads).
TEST_F(NetSocketCtrl, InlineSizeZeroAndLargerThanTheLimit) {
  env.set("NCCL_SOCKET_INLINE", "0");
  connect(false);
  const size_t sizes[] = {0, 1, 100, 65536, 65537};
  std::vector<void*> sends, recvs;
  for (int k = 0; k < 5; k++) {
    sends.push_back(isend(sizes[k], k));
    recvs.push_back(irecv(sizes[k], k));
    EXPECT_EQ(((socketRequest*)sends[k])->onCtrl, sizes[k] > 0 && sizes[k] <= 65536) << sizes[k] << " bytes";
  }
  finish(sends, recvs, 0);
  EXPECT_EQ(tasksPosted(), 1u) << "65537 bytes: one chunk (at least 256 KiB)";
  TearDown();
  sc = rc = lc = nullptr;
  ctx = nullptr;
  out.clear();
  outSize.clear();
  in.clear();
  env.set("NCCL_SOCKET_INLINE", "4096");
  env.set("RAILNET_SOCKET_CTRL_PAYLOAD", "1024");
  ASSERT_EQ(net()->init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
  connect(false);
  sends.clear();
  recvs.clear();
  const size_t sizes2[] = {1000, 4096, 4097};
  for (int k = 0; k < 3; k++) {
    sends.push_back(isend(sizes2[k], k));
    recvs.push_back(irecv(sizes2[k], k));
    EXPECT_EQ(((socketRequest*)sends[k])->onCtrl, 0) << sizes2[k] << " bytes";
  }
  finish(sends, recvs, 0);
  EXPECT_EQ(tasksPosted(), 1u) << "4097 bytes on a data socket";
}

// A peer that writes flags this comm never offers, or where they cannot be: an unknown bit
// (4 and bits 8-15 were an earlier railnet's first socket), both the control-socket and the
// chunk-size flag (one says the payload is on the control socket, the other on the data
// sockets), the control-socket flag with a socket set, a set without the chunk-size flag (the
// ends could cut by different sizes), any flag on a message the receiver
// takes as inline (another NCCL_SOCKET_INLINE at the peer). The receive fails with the WARN;
// nothing is read past the record as a payload or a socket set.
TEST_F(NetSocketCtrl, UnknownOrMisplacedFlagsFailTheReceive) {
  const uint32_t both = RAILNET_SOCKET_REC_ON_CTRL | RAILNET_SOCKET_REC_TASK_SIZE;
  const uint32_t set = RAILNET_SOCKET_REC_SOCK_SET;
  struct Case {
    uint32_t flags;
    size_t size;  // 100: inline
  };
  for (Case c : {Case{4u, 4096}, Case{16u, 4096}, Case{0x80000000u, 4096}, Case{both, 4096},
                 Case{RAILNET_SOCKET_REC_ON_CTRL | set, 4096}, Case{set | 1u << 8, 4096}, Case{set, 4096},
                 Case{RAILNET_SOCKET_REC_TASK_SIZE | 1u << 8, 4096}, Case{set | 1u << 16, 4096},
                 Case{RAILNET_SOCKET_REC_ON_CTRL, 100}, Case{RAILNET_SOCKET_REC_TASK_SIZE, 100}, Case{set, 100}}) {
    connect(false);
    ASSERT_EQ(R()->nSocks, 4);
    LogCapture cap;
    void* s = isend(c.size, 0);
    ctrlRecord rec;
    memcpy(&rec, ((socketRequest*)s)->ctrl, sizeof(rec));  // posted, not sent yet: the peer's bytes
    rec.flags = c.flags;
    memcpy(((socketRequest*)s)->ctrl, &rec, sizeof(rec));
    void* r = irecv(c.size, 0);
    EXPECT_EQ(receiveFailure(s, r), ncclRemoteError) << "flags " << std::hex << c.flags;
    EXPECT_TRUE(LogCapture::contains("did not offer")) << LogCapture::all();
    closeComms();
  }
}

// A socket set that does not fit the receiving comm (RAILNET_SOCKET_REC_SOCK_SET, the set
// after the record), written straight on the control socket by a broken peer, the set
// arriving after the record was parsed: no socket, a socket it does not have (4 and 63 of
// 4), more sockets than the payload makes chunks (300000 bytes in chunks of at least 256
// KiB: 2, not 3 or 4). The test() that reads it fails the receive with the WARN, and no
// chunk is posted.
TEST_F(NetSocketCtrl, ASocketSetThatDoesNotFitFailsTheReceive) {
  for (uint64_t bad : {0x0ull, 0x10ull, 0x11ull, 1ull << 63, 0x7ull, 0xfull}) {
    connect(false);
    ASSERT_EQ(R()->balance, 1);
    LogCapture cap;
    ctrlRecord rec = {300000, 0, RAILNET_SOCKET_REC_SOCK_SET | RAILNET_SOCKET_REC_TASK_SIZE};
    void* r = irecv(300000, 0);
    socketRequest* rr = (socketRequest*)r;
    ASSERT_EQ(send(S()->ctrl.fd, &rec, sizeof(rec), 0), (ssize_t)sizeof(rec));
    ncclResult_t res = ncclSuccess;
    int done = 0;
    long long dl = netNowNs() + 30000000000LL;
    while (!rr->recordParsed && res == ncclSuccess && netNowNs() < dl) res = net()->test(r, &done, nullptr);
    ASSERT_EQ(res, ncclSuccess) << "the record alone, its set still to come";
    ASSERT_EQ(done, 0);
    ASSERT_EQ(send(S()->ctrl.fd, &bad, sizeof(bad), 0), (ssize_t)sizeof(bad));  // the set after it
    while (res == ncclSuccess && !done && netNowNs() < dl) {
      res = net()->test(r, &done, nullptr);
      if (res == ncclSuccess) {
        EXPECT_NE(rr->state, (int)REQ_FAILED) << "the test() that found it said nothing";
      }
    }
    EXPECT_EQ(res, ncclRemoteError) << "set 0x" << std::hex << bad;
    EXPECT_EQ(done, 0);
    EXPECT_EQ(rr->state, (int)REQ_FAILED);
    EXPECT_TRUE(LogCapture::contains("do not fit this comm's 4 data sockets")) << LogCapture::all();
    EXPECT_EQ(((socketRequest*)r)->nTasks, 0);
    closeComms();
  }
}

}  // namespace

namespace {

// The chunk size is the receiver's (RAILNET_SOCKET_MIN_TASKSIZE, stated in its handle): a
// connector whose own settings differ (NCCL_SOCKET_MIN_TASKSIZE 16 KiB, its
// RAILNET_SOCKET_MIN_TASKSIZE off) cuts by the receiver's 1 MiB and flags its records so, or
// the bytes would land in the wrong places.
TEST_F(NetSocketCtrl, TheReceiversChunkSizeBindsBothEnds) {
  env.set("RAILNET_SOCKET_MIN_TASKSIZE", "1048576");
  connect(false, [&] {
    env.set("RAILNET_SOCKET_MIN_TASKSIZE", "0");
    env.set("NCCL_SOCKET_MIN_TASKSIZE", "16384");
  });
  EXPECT_EQ(R()->statedTask, 1048576u);
  EXPECT_EQ(S()->minTask, 1048576u);
  const size_t sizes[] = {70000, (3u << 20) + 5, 5u << 20, 200000};
  std::vector<void*> sends, recvs;
  for (int k = 0; k < 4; k++) {
    sends.push_back(isend(sizes[k], k));
    recvs.push_back(irecv(sizes[k], k));
  }
  finish(sends, recvs, 0);
  EXPECT_EQ(tasksPosted(), 1u + 4u + 4u + 1u) << "3 MiB + 5: 1 MiB chunks; 5 MiB: one per data socket";
}

// RAILNET_SOCKET_MIN_TASKSIZE=0 at the receiver states nothing: NCCL's rule, each end its own
// NCCL_SOCKET_MIN_TASKSIZE (the same here: the default 64 KiB).
TEST_F(NetSocketCtrl, NoChunkSizeStatedIsNcclsRule) {
  env.set("RAILNET_SOCKET_MIN_TASKSIZE", "0");
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  ASSERT_EQ(net()->listen(ctx, 0, handle, &l), ncclSuccess);
  socketHandle h;
  memcpy(&h, handle, sizeof(h));
  EXPECT_EQ(h.flags & RAILNET_SOCKET_HANDLE_TASK_SIZE, 0u);
  EXPECT_EQ(h.flags & RAILNET_SOCKET_HANDLE_SOCK_SET, 0u) << "a set without a stated chunk size";
  net()->closeListen(l);
  connect(false);
  EXPECT_EQ(S()->balance, 0);
  EXPECT_EQ(S()->minTask, 65536u);
  EXPECT_EQ(S()->statedTask, 0u);
  EXPECT_EQ(R()->statedTask, 0u);
  std::vector<void*> sends{isend(300000, 0)}, recvs{irecv(300000, 0)};
  finish(sends, recvs, 0);
  EXPECT_EQ(tasksPosted(), 4u) << "300000 bytes: one chunk per data socket";
}

// An older sender (it knows no chunk-size flag: records without it) and a receiver that
// stated 256 KiB: the receiver cuts those messages by NCCL's rule, its own
// NCCL_SOCKET_MIN_TASKSIZE, as the older sender does, and every byte arrives.
TEST_F(NetSocketCtrl, AnOlderSendersRecordsAreCutByNcclsRule) {
  connect(false);
  ASSERT_EQ(R()->statedTask, 262144u);
  S()->statedTask = 0;  // what an older sender does: no flags on its records ...
  S()->balance = 0;
  S()->minTask = 65536; // ... and its own NCCL_SOCKET_MIN_TASKSIZE
  const size_t sizes[] = {70000, 300000, (1u << 20) + 7};
  std::vector<void*> sends, recvs;
  for (int k = 0; k < 3; k++) {
    sends.push_back(isend(sizes[k], k));
    recvs.push_back(irecv(sizes[k], k));
  }
  finish(sends, recvs, 0);
  EXPECT_EQ(tasksPosted(), 2u + 4u + 4u) << "70000: 64 KiB and the rest; 300000 and 1 MiB: one per data socket";
}

// A handle that states a chunk size of 0 or above INT32_MAX is corrupt: connect refuses it
// with a WARN, and nothing is connected.
TEST_F(NetSocketCtrl, AHandleWithAnImpossibleChunkSizeIsRefused) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(net()->listen(ctx, 0, handle, &lc), ncclSuccess);
  for (uint32_t bad : {0u, 0x80000000u, 0xffffffffu}) {
    char copy[NCCL_NET_HANDLE_MAXSIZE];
    memcpy(copy, handle, sizeof(copy));
    memcpy(copy + offsetof(socketHandle, taskSize), &bad, sizeof(bad));
    LogCapture cap;
    void* s = nullptr;
    ncclNetDeviceHandle_v12_t* dc = nullptr;
    EXPECT_EQ(net()->connect(ctx, 0, copy, &s, &dc), ncclInvalidArgument) << bad;
    EXPECT_EQ(s, nullptr);
    EXPECT_TRUE(LogCapture::contains("chunk size")) << LogCapture::all();
  }
}

}  // namespace

namespace {

// Once a receive's record has arrived and its payload is cut into chunks, the helper threads
// move those chunks even if test() is never called on it again: they wait in poll() with
// SO_RCVLOWAT set to the bytes their chunks still wait for (at most 512 KiB), and read them.
TEST_F(NetSocketCtrl, HelpersFinishAReceiveThatIsNotTestedAgain) {
  // socket buffers far smaller than a chunk: the test() that parses the record cannot find
  // the whole payload already there and finish the receive itself
  env.set("NCCL_SOCKET_SNDBUF", "65536");
  env.set("NCCL_SOCKET_RCVBUF", "65536");
  connect(false);
  const size_t size = 6u << 20;  // 4 chunks of 1.5 MiB: each more than one low-water mark
  void* r = irecv(size, 0);
  void* s = isend(size, 0);
  socketRequest* rr = (socketRequest*)r;
  long long dl = netNowNs() + 30000000000LL;
  int sdone = 0, rdone = 0, size0 = 0;
  while (rr->state != REQ_DATA && netNowNs() < dl) {  // until the record is parsed: then no more test(r)
    if (!sdone) {
      ASSERT_EQ(net()->test(s, &sdone, nullptr), ncclSuccess);
    }
    ASSERT_EQ(net()->test(r, &rdone, &size0), ncclSuccess);
    ASSERT_EQ(rdone, 0) << "done before its record was parsed";
  }
  ASSERT_EQ(rr->state, REQ_DATA);
  ASSERT_EQ(rr->nTasks, 4);
  auto allDone = [&] {
    for (int i = 0; i < rr->nTasks; i++)
      if (!__atomic_load_n(&R()->queues[rr->taskSock[i]].tasks[rr->taskIdx[i]].done, __ATOMIC_ACQUIRE)) return false;
    return true;
  };
  while (!allDone() && netNowNs() < dl) {
    if (!sdone) {
      ASSERT_EQ(net()->test(s, &sdone, nullptr), ncclSuccess);
    }
  }
  ASSERT_TRUE(allDone()) << "the helper threads did not finish the chunks in 30 s";
  while (!sdone && netNowNs() < dl) ASSERT_EQ(net()->test(s, &sdone, nullptr), ncclSuccess);
  ASSERT_EQ(net()->test(r, &rdone, &size0), ncclSuccess);
  ASSERT_EQ(rdone, 1);
  EXPECT_EQ((size_t)size0, size);
  EXPECT_EQ(memcmp(in[0].data(), out[0].data(), size), 0);
  for (int k = 0; k < R()->nSocks; k++) {
    int lowat = 0;
    socklen_t len = sizeof(lowat);
    ASSERT_EQ(getsockopt(R()->socks[k].fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &len), 0);
    EXPECT_GE(lowat, 1);
    EXPECT_LE(lowat, 512 * 1024) << "data socket " << k;
  }
}

}  // namespace

namespace {

// RAILNET_SOCKET_BALANCE (default on): a message goes to the data sockets that would deliver
// it soonest, named in its record, and the receiver takes the chunks from there. Socket 0
// looks, to the sender, like a connection that stopped moving: a backlog that never drains,
// measured at the lowest rate. Messages of 2 chunks: none goes there, on either end, the
// other three share them evenly (any two of them, not only neighbours), and every byte
// arrives. (netns: a connection really slowed.)
TEST_F(NetSocketCtrl, ChunksAvoidAStalledSocket) {
  ASSERT_NO_FATAL_FAILURE(connectBalancedWithSocket0Behind());
  std::vector<uint32_t> s;
  ASSERT_NO_FATAL_FAILURE(exchange(524288, 12, &s));  // 512 KiB: 2 chunks of 256 KiB on 4 sockets
  EXPECT_EQ(s[0], 0u) << "a chunk went to the socket with the backlog";
  EXPECT_EQ(s[1] + s[2] + s[3], 24u);
  uint32_t most = std::max({s[1], s[2], s[3]}), least = std::min({s[1], s[2], s[3]});
  EXPECT_LE(most - least, 2u) << s[1] << " " << s[2] << " " << s[3] << " chunks on sockets 1, 2, 3";
}

// Messages of 2 MiB have a chunk for every socket (4 of 512 KiB); socket 0 is behind (64 MiB
// not delivered) and slow: they leave it out and go in 3 chunks of a third each (the last one
// short), on both ends alike, every byte where it belongs.
TEST_F(NetSocketCtrl, MessagesForEverySocketLeaveOutOneBehind) {
  ASSERT_NO_FATAL_FAILURE(connectBalancedWithSocket0Behind());
  std::vector<uint32_t> s;
  ASSERT_NO_FATAL_FAILURE(exchange(2u << 20, 6, &s));
  EXPECT_EQ(s[0], 0u) << "a chunk went to the socket that is behind";
  EXPECT_EQ(s[1], 6u);
  EXPECT_EQ(s[2], 6u);
  EXPECT_EQ(s[3], 6u);
}

// A socket measured slow long ago (stale) is credited the fastest rate again, so it gets a
// probe, only once it has nothing left to deliver and 16 of its chunk-times have passed since
// it was measured (16 x 256 KiB at 512 KB/s: 8.2 s); otherwise, its own rate. A probe the
// sender waited for (the path stayed slow) so does not bring the next one at once.
TEST(NetSocketBalance, AStaleSlowSocketIsProbedOncePer16ChunkTimes) {
  taskQueue q;
  memset(&q, 0, sizeof(q));
  const double slow = 512e3 / 1e9, fastest = 1.0;  // bytes per ns
  const size_t chunk = 256u << 10;
  const uint64_t now = 100000000000ull, sec = 1000000000ull;
  q.rate = slow;
  q.planned = q.acked = 4u << 20;
  q.stale = 1;
  q.ratedNs = now - 1 * sec;
  EXPECT_EQ(railnetSocketProbeRate(&q, fastest, chunk, now), slow) << "probed 1 s after it was measured";
  q.ratedNs = now - 8 * sec;
  EXPECT_EQ(railnetSocketProbeRate(&q, fastest, chunk, now), slow) << "probed 8 s after it was measured";
  q.ratedNs = now - 9 * sec;
  EXPECT_EQ(railnetSocketProbeRate(&q, fastest, chunk, now), fastest) << "not probed 9 s after";
  q.planned += chunk;  // the probe is on its way: no second one until it was measured again
  EXPECT_EQ(railnetSocketProbeRate(&q, fastest, chunk, now), slow);
  q.acked = q.planned;
  q.probedNs = now - 1 * sec;  // the probe was delivered: the next one 16 chunk-times after it
  EXPECT_EQ(railnetSocketProbeRate(&q, fastest, chunk, now), slow);
  q.probedNs = 0;
  q.stale = 0;  // measured lately: its own rate, however long ago
  EXPECT_EQ(railnetSocketProbeRate(&q, fastest, chunk, now), slow);
  q.stale = 1;
  EXPECT_EQ(railnetSocketProbeRate(&q, slow / 2, chunk, now), slow) << "faster than the fastest: its own rate";
  q.rate = 0.5;  // a fast path: 16 chunk-times are 8 ms, so it is probed again after 100 ms
  q.ratedNs = now - sec / 10;
  EXPECT_EQ(railnetSocketProbeRate(&q, fastest, chunk, now), fastest);
}

// Socket 0 measured at 512 KB/s 20 s ago, stale: the next message takes it as a probe (its
// 16 chunk-times, 8.2 s, have passed; the other sockets are not measured, so it is credited
// as they are), remembered as a probe of one chunk. Every byte arrives.
TEST_F(NetSocketCtrl, AStaleSlowSocketGetsAProbe) {
  connect(false);
  ASSERT_EQ(S()->balance, 1);
  taskQueue* q = &S()->queues[0];
  q->rate = 512e3 / 1e9;
  q->stale = 1;
  q->ratedNs = railnetClockNs() - 20000000000ull;
  std::vector<uint32_t> s;
  ASSERT_NO_FATAL_FAILURE(exchange(512u << 10, 1, &s));  // 2 chunks of 256 KiB
  EXPECT_EQ(s[0], 1u) << "socket 0 got no probe";
  EXPECT_EQ(q->probeBytes, 256u << 10);
}

// A probe seen delivered (what the socket acknowledged reached the probe's end) was delivered
// at least at its size over the time since it was given: a rate more than twice the measured
// one is replaced by that bound, and the socket is no longer stale (a path that got better);
// a probe no faster than that leaves the rate as it is. Either way the probe is over. The
// queue's state is set by the test (nothing in flight: the idle socket's SIOCOUTQ is 0).
TEST_F(NetSocketCtrl, ADeliveredProbeRaisesOnlyARateItBeatsTwice) {
  connect(false);
  ASSERT_EQ(S()->balance, 1);
  taskQueue* q = &S()->queues[0];
  const uint64_t probe = 256u << 10;
  q->rate = 1e-9;  // 1 byte per second
  q->stale = 1;
  q->planned = q->moved = 1u << 20;
  q->probeBytes = probe;
  q->probeEnd = q->planned;
  uint64_t t0 = railnetClockNs();
  q->probedNs = t0;
  (void)railnetSocketChooseSet(S(), 1024, 0);
  uint64_t t1 = railnetClockNs();
  EXPECT_EQ(q->probeEnd, 0u);
  EXPECT_EQ(q->stale, 0);
  EXPECT_GE(q->rate, (double)probe / (double)(t1 - t0 + 1)) << "at least its size over the time it took";
  EXPECT_GE(q->ratedNs, t0);
  const double fast = 1e6;  // no probe beats twice this
  q->rate = fast;
  q->stale = 1;
  q->moved = q->planned;
  q->probeEnd = q->planned;
  q->probedNs = railnetClockNs();
  (void)railnetSocketChooseSet(S(), 1024, 0);
  EXPECT_EQ(q->probeEnd, 0u);
  EXPECT_EQ(q->rate, fast);
}

// Messages of 700 KiB: 3 chunks on 4 sockets (256 KiB, 256 KiB and a short last one, on the
// highest socket of the set), so the round-robin choice wraps (sockets 3, 0, 1 after 0, 1,
// 2); one socket measured slower than the others but not stalled. Both ends place every
// chunk alike, and every byte arrives where it belongs.
TEST_F(NetSocketCtrl, WrappingSetsAndShortChunksArriveWhole) {
  connect(false);
  ASSERT_EQ(S()->balance, 1);
  S()->queues[2].rate = 0.3;
  S()->queues[2].ratedNs = railnetClockNs();
  std::vector<uint32_t> s;
  ASSERT_NO_FATAL_FAILURE(exchange(700u << 10, 10, &s));
  EXPECT_EQ(s[0] + s[1] + s[2] + s[3], 30u);
}

// A handle that offers socket sets but states no chunk size (a foreign or broken listener):
// the connector does not name sets (each end could cut by its own NCCL_SOCKET_MIN_TASKSIZE),
// and every byte arrives in round-robin order.
TEST_F(NetSocketCtrl, ASetOfferWithoutAChunkSizeIsNotUsed) {
  clearFlags = RAILNET_SOCKET_HANDLE_TASK_SIZE;
  connect(false);
  EXPECT_EQ(R()->balance, 1) << "the listener offered sets";
  EXPECT_EQ(S()->balance, 0);
  EXPECT_EQ(S()->statedTask, 0u);
  std::vector<void*> sends, recvs;
  for (int k = 0; k < 4; k++) {
    sends.push_back(isend(300000, k));
    recvs.push_back(irecv(300000, k));
  }
  finish(sends, recvs, 0);
  EXPECT_EQ(tails(S()), tails(R()));
  EXPECT_EQ(tasksPosted(), 16u) << "300000 bytes: one chunk per data socket (64 KiB at least)";
}

// With the sender's RAILNET_SOCKET_BALANCE=0 (no socket in its records; the receiver, which
// offered it, takes the round-robin order) or the receiver's (no offer in its handle: the
// sender names none), the sockets get equal shares, NCCL's round-robin. With it on at both
// ends the choice depends on measured rates: both ends still place every chunk alike.
TEST_F(NetSocketCtrl, BalanceOffAtEitherEndIsRoundRobin) {
  for (int mode = 0; mode < 3; mode++) {
    if (mode == 2) env.set("RAILNET_SOCKET_BALANCE", "0");
    connect(false, [&] { env.set("RAILNET_SOCKET_BALANCE", mode == 1 ? "0" : "1"); });
    EXPECT_EQ(S()->balance, mode == 0 ? 1 : 0) << "mode " << mode;
    EXPECT_EQ(R()->balance, mode == 2 ? 0 : 1) << "mode " << mode;
    std::vector<void*> sends, recvs;
    size_t first = out.size();
    for (int k = 0; k < 8; k++) {  // one message at a time: each finds the others' chunks moved
      sends.assign(1, isend(524288, k));
      recvs.assign(1, irecv(524288, k));
      finish(sends, recvs, first + k);
    }
    std::vector<uint32_t> s = tails(S()), r = tails(R());
    EXPECT_EQ(s, r) << "mode " << mode;
    if (mode > 0) {
      EXPECT_EQ(s, std::vector<uint32_t>(4, 4)) << "mode " << mode;
    } else {
      EXPECT_EQ(s[0] + s[1] + s[2] + s[3], 16u);
    }
    closeComms();
    env.unset("RAILNET_SOCKET_BALANCE");
  }
}

}  // namespace
