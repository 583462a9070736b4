// The IB transport's edges over the loopback fake (ib_data_fixture.h): what a stranger at the
// listen port and an oversized message get.
#include <malloc.h>
#include <memory>
#include <vector>
#include "ib_data_fixture.h"

extern "C" {
#include "socket.h"
#include "../../src/transport/net_ib/wire.h"
}

namespace {

class IbEdges : public IbDataPath {
 protected:
  // Listens on fk1 (handle) and connects a stranger to it that does the socket handshake of an
  // IB listener (NCCL's magic from the handle, the IB socket type) and nothing else yet.
  void listenWithAStranger(char* handle, struct ncclSocket* stranger) {
    ASSERT_EQ(ib->listen(ctx, dev1, handle, &lc), ncclSuccess);
    addStranger(handle, stranger);
  }
  // Another such stranger at the listener of handle.
 public:
  void addStrangerTo(const char* handle, struct ncclSocket* stranger) { addStranger(handle, stranger); }

 protected:
  void addStranger(const char* handle, struct ncclSocket* stranger) {
    struct ncclIbHandle h;
    memcpy(&h, handle, sizeof(h));
    ASSERT_EQ(ncclSocketInit(stranger, &h.connectAddr, h.socketMagic, ncclSocketTypeNetIb, nullptr, 0), ncclSuccess);
    ASSERT_EQ(ncclSocketConnect(stranger), ncclSuccess);
  }
};

// A message larger than the wire's 32-bit sizes carry (4 GiB + 100 B: the low 32 bits say
// 100) is refused with ncclInvalidArgument and a WARN, before anything is posted; the comm
// goes on working.
TEST_F(IbEdges, AnIsendLargerThanTheWireCarriesIsRefused) {
  ncclNetProperties_t p;
  ASSERT_EQ(ib->getProperties(dev0, &p), ncclSuccess);
  EXPECT_EQ(p.maxP2pBytes, (size_t)RAILNET_IB_MAX_MSG_BYTES);
  LogCapture log;
  connect(dev0, dev1);
  ASSERT_NE(sc, nullptr);
  void* smh;
  char* src = buffer(sc, 4096, &smh);
  for (size_t size : {(size_t)(4ull << 30) + 100, (size_t)RAILNET_IB_MAX_MSG_BYTES + 1}) {
    void* req = nullptr;
    EXPECT_EQ(ib->isend(sc, src, size, 0, smh, nullptr, &req), ncclInvalidArgument) << size;
    EXPECT_EQ(req, nullptr);
  }
  EXPECT_TRUE(LogCapture::contains("more than the 1073741824 bytes one message can carry", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_EQ(stream(8, 5000, 2, nullptr), "");
}

// A stranger (or a misconfigured peer) that passes the handshake and sends metadata the
// checks accept but this side's setup refuses (an InfiniBand link layer to a RoCE port):
// accept drops that connection with a WARN and keeps listening, and the real peer behind it
// connects. Before, accept returned ncclRemoteError, which ends an NCCL job.
TEST_F(IbEdges, MetadataThatFailsSetupDropsTheConnectionNotTheListener) {
  LogCapture log;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  struct ncclSocket stranger;
  listenWithAStranger(handle, &stranger);
  if (HasFatalFailure()) return;
  struct ncclIbConnectionMetadata m;
  memset(&m, 0, sizeof(m));
  m.magic = RAILNET_IB_META_MAGIC;
  m.version = RAILNET_IB_META_VERSION;
  m.ndevs = 1;
  m.nqps = 1;
  m.fifoAddr = 0x1000;
  m.devs[0].linkLayer = IBV_LINK_LAYER_INFINIBAND;
  m.devs[0].mtu = IBV_MTU_1024;
  m.devs[0].fifoRkey = 1;
  m.devs[0].lid = 7;
  m.qpInfo[0].qpn = 99;
  ASSERT_EQ(ncclSocketSend(&stranger, &m, (int)sizeof(m)), ncclSuccess);
  // the listener takes the stranger's connection first, refuses it, and stays usable
  for (int i = 0; i < 2000 && !LogCapture::contains("still listening", NCCL_LOG_WARN); i++) {
    ASSERT_EQ(ib->accept(lc, &rc, nullptr), ncclSuccess) << LogCapture::all();
    ASSERT_EQ(rc, nullptr);
  }
  EXPECT_TRUE(LogCapture::contains("link layer mismatch", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("refused the connection from", NCCL_LOG_WARN)) << LogCapture::all();
  int closed = 0, off = 0;
  char b;
  for (int i = 0; i < 2000 && !closed; i++)
    ASSERT_EQ(ncclSocketProgress(NCCL_SOCKET_RECV, &stranger, &b, 1, &off, &closed), ncclSuccess);
  EXPECT_TRUE(closed) << "the stranger's connection is closed";
  ncclSocketClose(&stranger);
  ASSERT_TRUE(netConnectPair(ib, ctx, dev0, handle, lc, &sc, &rc, 20000)) << LogCapture::all();
  EXPECT_EQ(stream(4, 3000, 2, nullptr), "");
}

// Strangers (or peer hosts that died mid-setup) that pass the handshake, send part of their
// metadata and go silent, then `n` of them: each is dropped RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC
// after its step began, with a WARN, while accept goes on being called; none holds the
// listener. Returns the strangers' sockets (closed by the caller).
std::vector<std::unique_ptr<struct ncclSocket>> silentStrangers(IbEdges* t, const char* handle, int n) {
  std::vector<std::unique_ptr<struct ncclSocket>> v;
  char part[100];
  memset(part, 0, sizeof(part));
  for (int k = 0; k < n; k++) {
    v.push_back(std::make_unique<struct ncclSocket>());
    t->addStrangerTo(handle, v.back().get());
    EXPECT_EQ(ncclSocketSend(v.back().get(), part, (int)sizeof(part)), ncclSuccess);
  }
  return v;
}

int warnsWith(const std::string& what) {
  int n = 0;
  for (auto& l : LogCapture::lines()) n += l.level == NCCL_LOG_WARN && l.msg.find(what) != std::string::npos;
  return n;
}

// Three silent strangers mid-setup in front of the real peer, at NCCL's settings (the accept
// bound 10 s): the real peer connects while they are all still pending (the listener sets up
// to 8 connections at once), without waiting for their bound.
TEST_F(IbEdges, SilentStrangersMidSetupDoNotDelayTheRealPeer) {
  LogCapture log;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(ib->listen(ctx, dev1, handle, &lc), ncclSuccess);
  auto strangers = silentStrangers(this, handle, 3);
  if (HasFailure()) return;
  ASSERT_TRUE(netConnectPair(ib, ctx, dev0, handle, lc, &sc, &rc, 20000)) << LogCapture::all();
  EXPECT_EQ(warnsWith("dropped the connection, still listening"), 0)
      << "the real peer waited for a stranger's bound\n" << LogCapture::all();
  EXPECT_EQ(stream(4, 3000, 2, nullptr), "");
  for (auto& s : strangers) ncclSocketClose(s.get());
}

// A silent stranger mid-setup is still dropped at its bound (300 ms here) with a WARN, while
// accept is called for the next connection; the real peer beside it connected at once.
TEST_F(IbEdges, ASilentPeerMidSetupIsDroppedAtTheAcceptTimeout) {
  env.set("RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC", "300");
  LogCapture log;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(ib->listen(ctx, dev1, handle, &lc), ncclSuccess);
  auto strangers = silentStrangers(this, handle, 1);
  if (HasFailure()) return;
  ASSERT_TRUE(netConnectPair(ib, ctx, dev0, handle, lc, &sc, &rc, 20000)) << LogCapture::all();
  std::string dropped = "100 of " + std::to_string(sizeof(struct ncclIbConnectionMetadata)) +
                        " bytes of its connection metadata came after 300 ms";
  void* more = nullptr;
  long long deadline = netNowNs() + 10000000000LL;
  while (warnsWith(dropped) == 0 && more == nullptr && netNowNs() < deadline)
    ASSERT_EQ(ib->accept(lc, &more, nullptr), ncclSuccess);
  EXPECT_EQ(more, nullptr) << "a stranger's connection was accepted";
  EXPECT_EQ(warnsWith(dropped), 1) << LogCapture::all();
  EXPECT_EQ(stream(4, 3000, 2, nullptr), "");
  for (auto& s : strangers) ncclSocketClose(s.get());
}

// More silent strangers than the listener sets up at once (10 > 8) in front of the real peer:
// the slots fill, the strangers are dropped at their bound (300 ms), and the real peer behind
// them connects then.
TEST_F(IbEdges, MoreSilentStrangersThanSlotsAreDroppedAndTheRealPeerConnects) {
  env.set("RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC", "300");
  LogCapture log;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(ib->listen(ctx, dev1, handle, &lc), ncclSuccess);
  auto strangers = silentStrangers(this, handle, 10);
  if (HasFailure()) return;
  ASSERT_TRUE(netConnectPair(ib, ctx, dev0, handle, lc, &sc, &rc, 20000)) << LogCapture::all();
  EXPECT_GE(warnsWith("dropped the connection, still listening"), 2)
      << "the real peer got in before the 8 slots were freed?\n" << LogCapture::all();
  EXPECT_EQ(stream(4, 3000, 2, nullptr), "");
  for (auto& s : strangers) ncclSocketClose(s.get());
}

// A listener's slot that waits for a connection holds a socket, not a comm: NCCL keeps a listen
// comm per peer and channel until the connection is there (and a benchmark keeps them open),
// so an idle slot's comm (21 KiB) and metadata (9 KiB) were resident for every one. 32
// listeners, accept called on each with nobody connecting: under 2 KiB of heap each (the
// listen comm and its slot); then a peer connects to one of them and its messages arrive.
TEST_F(IbEdges, AListenerWaitingForAConnectionHoldsNoComm) {
  const int n = 32;
  std::vector<void*> lcs(n, nullptr);
  std::vector<std::vector<char>> handles(n, std::vector<char>(NCCL_NET_HANDLE_MAXSIZE));
  size_t before = mallinfo2().uordblks;
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(ib->listen(ctx, dev1, handles[i].data(), &lcs[i]), ncclSuccess);
    for (int k = 0; k < 3; k++) {
      void* rcomm = nullptr;
      ASSERT_EQ(ib->accept(lcs[i], &rcomm, nullptr), ncclSuccess);
      ASSERT_EQ(rcomm, nullptr);
    }
  }
  size_t after = mallinfo2().uordblks;
  EXPECT_LT((after - before) / n, (size_t)2048) << "bytes of heap per idle listener";
  lc = lcs[n - 1];
  lcs[n - 1] = nullptr;
  ASSERT_TRUE(netConnectPair(ib, ctx, dev0, handles[n - 1].data(), lc, &sc, &rc, 20000)) << LogCapture::all();
  EXPECT_EQ(stream(4, 3000, 2, nullptr), "");
  for (void* l : lcs) {
    if (l == nullptr) continue;
    EXPECT_EQ(ib->closeListen(l), ncclSuccess);
  }
}

}  // namespace
