// The IB transport's edges over the loopback fake (ib_data_fixture.h): what a stranger at the
// listen port and an oversized message get.
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

// A stranger (or a peer host that died mid-setup) that passes the handshake, sends part of its
// metadata and goes silent is dropped RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC after it connected,
// with a WARN; the real peer behind it connects. Before, it held accept for ever.
TEST_F(IbEdges, ASilentPeerMidSetupIsDroppedAtTheAcceptTimeout) {
  env.set("RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC", "300");
  LogCapture log;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  struct ncclSocket stranger;
  listenWithAStranger(handle, &stranger);
  if (HasFatalFailure()) return;
  char part[100];
  memset(part, 0, sizeof(part));
  ASSERT_EQ(ncclSocketSend(&stranger, part, (int)sizeof(part)), ncclSuccess);
  ASSERT_TRUE(netConnectPair(ib, ctx, dev0, handle, lc, &sc, &rc, 20000)) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("100 of " + std::to_string(sizeof(struct ncclIbConnectionMetadata)) +
                                       " bytes of its connection metadata came after 300 ms",
                                   NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_EQ(stream(4, 3000, 2, nullptr), "");
  ncclSocketClose(&stranger);
}

}  // namespace
