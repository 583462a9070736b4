// IB discovery, properties and virtual devices on fake HCAs (ibvwrap's injected symbol table)
// with PCI links in a sysfs tree made by the test ($SYSFS_PATH). The speed table too.
#include "test_util.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <thread>
#include "ib_fake_verbs.h"

extern "C" {
#include "../../src/transport/net_ib/devices.h"
#include "../../src/transport/net_ib/discovery.h"
#include "../../src/transport/net_ib/init.h"
#include "../../src/transport/net_ib/liveness.h"
#include "testing.h"
}

namespace {

// ---------------------------------------------------------------- speed

TEST(IbSpeedTest, EveryRateAndWidth) {
  struct { int bit; int mbps; } rates[] = {{1, 2500},   {2, 5000},   {4, 10000},  {8, 10000}, {16, 14000},
                                           {32, 25000}, {64, 50000}, {128, 100000}, {256, 200000}};
  struct { int bit; int lanes; } widths[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  for (auto r : rates) {
    EXPECT_EQ(ncclIbSpeed(r.bit), r.mbps) << r.bit;
    for (auto wd : widths) {
      EXPECT_EQ(ncclIbWidth(wd.bit), wd.lanes) << wd.bit;
      if (r.bit < 256) {
        EXPECT_EQ(railnetIbPortSpeed(r.bit, 0, wd.bit), r.mbps * wd.lanes);
      }
      // active_speed_ex (XDR and later) wins over active_speed when set
      EXPECT_EQ(railnetIbPortSpeed(1, r.bit, wd.bit), r.mbps * wd.lanes);
    }
  }
  EXPECT_EQ(railnetIbPortSpeed(128, 0, 2), 400000);  // NDR 4x
  EXPECT_EQ(railnetIbPortSpeed(0, 256, 2), 800000);  // XDR 4x
  // several bits: the lowest one counts, as in NCCL
  EXPECT_EQ(ncclIbSpeed(32 | 64), 25000);
  EXPECT_EQ(ncclIbWidth(2 | 16), 4);
  // no bit at all: NCCL's table end (XDR, 2x)
  EXPECT_EQ(ncclIbSpeed(0), 200000);
  EXPECT_EQ(ncclIbWidth(0), 2);
}

// ---------------------------------------------------------------- discovery

class IbInitTest : public ::testing::Test {
 protected:
  ScopedEnv env;
  TempDir sysfs;
  FakeWorld w;
  struct railnetIbvSymbols table;
  std::vector<void*> ctxs;

  void SetUp() override {
    world = &w;
    table = fakeVerbs(true);
    railnetIbvSetSymbols(&table);
    env.set("SYSFS_PATH", sysfs.path().c_str());
    env.set("NCCL_SOCKET_IFNAME", "lo");
    for (const char* v : {"NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_IB_MERGE_VFS", "NCCL_IB_MERGE_NICS",
                          "NCCL_IB_GID_INDEX", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_PCI_RELAXED_ORDERING",
                          "NCCL_IB_DEVICE_PCI_ORDER", "NCCL_IB_RETURN_ASYNC_EVENTS", "NCCL_SOCKET_FAMILY"})
      env.unset(v);
    railnetIbResetDevices();
  }
  void resetAll() {
    for (void* c : ctxs) free(c);
    ctxs.clear();
    railnetIbResetDevices();
  }
  void TearDown() override {
    for (void* c : ctxs) railnetNetIb.finalize(c);
    railnetIbResetDevices();
    railnetIbvSetSymbols(nullptr);
    world = nullptr;
  }
  // <sysfs>/class/infiniband/<name>/device -> <sysfs>/devices/pci0000:00/<bdf>
  void pciLink(const std::string& name, const std::string& bdf) {
    std::string target = sysfs.path() + "/devices/pci0000:00/" + bdf;
    sysfs.write("devices/pci0000:00/" + bdf + "/vendor", "0x15b3\n");
    sysfs.write("class/infiniband/" + name + "/node_type", "1: CA\n");
    ASSERT_EQ(symlink(target.c_str(), (sysfs.path() + "/class/infiniband/" + name + "/device").c_str()), 0);
  }
  // mlx5_0: IB on 0000:17:00.0 (port 2 down), mlx5_1: RoCE on 0000:03:00.0, rxe0: no PCI,
  // iw0: an iWARP-style port (link layer unspecified).
  void standardWorld() {
    FakeHca& a = addHca("mlx5_0", 2, IBV_LINK_LAYER_INFINIBAND, 0xaaaa);
    a.ports[1].attr.state = IBV_PORT_DOWN;
    a.ports[0].gids[0] = {"fe80::aa", 0};
    pciLink("mlx5_0", "0000:17:00.0");
    FakeHca& b = addHca("mlx5_1", 1, IBV_LINK_LAYER_ETHERNET, 0xbbbb);
    b.ports[0].attr.active_speed = 128;  // NDR
    b.ports[0].gids[0] = {"fe80::bb", 2};
    b.ports[0].gids[1] = {"::ffff:10.1.1.2", 2};
    pciLink("mlx5_1", "0000:03:00.0");
    FakeHca& r = addHca("rxe0", 1, IBV_LINK_LAYER_ETHERNET, 0xcccc);
    r.ports[0].attr.active_speed = 4;  // QDR
    r.ports[0].attr.active_width = 1;  // 1x
    r.ports[0].attr.gid_tbl_len = 1024;
    r.ports[0].gids.resize(1024);
    r.ports[0].gids[0] = {"fe80::c6:12ff:fe00:1", 2};
    r.ports[0].gids[1] = {"::ffff:198.18.0.1", 2};
    addHca("iw0", 1, 0 /* IBV_LINK_LAYER_UNSPECIFIED */);
  }
  ncclResult_t init() {
    void* ctx = nullptr;
    ncclResult_t res = railnetNetIb.init(&ctx, 0, nullptr, nullptr, nullptr);
    if (res == ncclSuccess) ctxs.push_back(ctx);
    return res;
  }
  int ndev() {
    int n = -1;
    EXPECT_EQ(railnetNetIb.devices(&n), ncclSuccess);
    return n;
  }
  std::string names() {
    std::string s;
    for (int d = 0; d < ndev(); d++) {
      ncclNetProperties_t p;
      EXPECT_EQ(railnetNetIb.getProperties(d, &p), ncclSuccess);
      s += (s.empty() ? "" : " ") + std::string(p.name) + ":" + std::to_string(p.port);
    }
    return s;
  }
  // re-run discovery with a new NCCL_IB_HCA
  std::string withHca(const char* spec) {
    for (void* c : ctxs) railnetNetIb.finalize(c);
    ctxs.clear();
    env.set("NCCL_IB_HCA", spec);
    if (init() != ncclSuccess) return "<init failed>";
    return names();
  }
};

TEST_F(IbInitTest, FindsActivePortsOrdersByPciAndLogsUsing) {
  standardWorld();
  LogCapture log;
  ASSERT_EQ(init(), ncclSuccess) << LogCapture::all();
  EXPECT_EQ(ndev(), 3);
  EXPECT_EQ(names(), "mlx5_1:1 mlx5_0:1 rxe0:1");
  EXPECT_TRUE(LogCapture::contains("NET/IB : Using [0]mlx5_1:1/RoCE [1]mlx5_0:1/IB [2]rxe0:1/RoCE ; OOB lo:127.0.0.1<0>"))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("NET/IB : mlx5_0:2 skipped: port state DOWN")) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("link layer 0 is neither InfiniBand nor Ethernet")) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("NET/IB : rxe0 has no PCI device")) << LogCapture::all();
  // the chosen GIDs are logged once per device
  EXPECT_TRUE(LogCapture::contains("NET/IB : rxe0:1 GID index 1 ::ffff:198.18.0.1 (RoCE v2, IPv4): best of 2 of 1024"))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("NET/IB : mlx5_1:1 GID index 1 ::ffff:10.1.1.2 (RoCE v2, IPv4)")) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("NET/IB : mlx5_0:1 GID index 0 fe80::aa (IB, IPv6): InfiniBand")) << LogCapture::all();
  EXPECT_EQ(LogCapture::contains("", NCCL_LOG_WARN), false) << LogCapture::all();
  EXPECT_EQ(ncclIbDevs[2].gidIndex, 1);
  // HCAs without a usable port are closed at once; the others stay open until finalize
  EXPECT_EQ(w.hcas[3].opens, 1);
  EXPECT_EQ(w.hcas[3].closes, 1);
  EXPECT_EQ(w.hcas[0].closes, 0);
  for (void* c : ctxs) railnetNetIb.finalize(c);
  ctxs.clear();
  for (int i = 0; i < 3; i++) EXPECT_EQ(w.hcas[i].closes, 1) << w.hcas[i].name;
  EXPECT_EQ(ndev(), 0);
}

TEST_F(IbInitTest, PropertiesOfPhysicalDevices) {
  standardWorld();
  ASSERT_EQ(init(), ncclSuccess);
  ncclNetProperties_t p;
  ASSERT_EQ(railnetNetIb.getProperties(0, &p), ncclSuccess);  // mlx5_1, RoCE, NDR 4x
  EXPECT_STREQ(p.name, "mlx5_1");
  EXPECT_EQ(p.speed, 400000);
  ASSERT_NE(p.pciPath, nullptr);
  EXPECT_NE(std::string(p.pciPath).find("/devices/pci0000:00/0000:03:00.0"), std::string::npos) << p.pciPath;
  EXPECT_EQ(p.guid, 0xbbbbu);
  EXPECT_EQ(p.port, 1);
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);  // no peer memory in the tree, no DMA-BUF verb
  EXPECT_EQ(p.regIsGlobal, 1);
  EXPECT_EQ(p.forceFlush, 0);
  EXPECT_EQ(p.maxComms, 131072);
  EXPECT_EQ(p.maxRecvs, 8);
  EXPECT_EQ(p.latency, 0);
  EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
  EXPECT_EQ(p.vProps.ndevs, 1);
  EXPECT_EQ(p.vProps.devs[0], 0);
  EXPECT_EQ(p.maxP2pBytes, (size_t)(1ull << 30)) << "the sizes travel in 32 bits: a power of two below INT_MAX";
  EXPECT_EQ(p.railId, -1);
  EXPECT_EQ(p.planeId, -1);
  ASSERT_EQ(railnetNetIb.getProperties(1, &p), ncclSuccess);  // mlx5_0, IB, EDR 4x
  EXPECT_EQ(p.speed, 100000);
  ASSERT_EQ(railnetNetIb.getProperties(2, &p), ncclSuccess);  // rxe0: QDR 1x, no PCI device
  EXPECT_STREQ(p.name, "rxe0");
  EXPECT_EQ(p.speed, 10000);
  EXPECT_EQ(p.pciPath, nullptr);
  // adaptive routing: on for IB, off for RoCE by default
  EXPECT_EQ(ncclIbDevs[0].ar, 0);
  EXPECT_EQ(ncclIbDevs[1].ar, 1);
  {
    LogCapture log;
    EXPECT_EQ(railnetNetIb.getProperties(3, &p), ncclInvalidUsage);
    EXPECT_TRUE(LogCapture::contains("NET/IB : Requested properties for vNic 3, only 3 vNics have been created",
                                     NCCL_LOG_WARN))
        << LogCapture::all();
  }
}

TEST_F(IbInitTest, AdaptiveRoutingAndRelaxedOrderingParams) {
  standardWorld();
  env.set("NCCL_IB_ADAPTIVE_ROUTING", "1");
  table.reg_mr_iova2 = fkRegMrIova2;
  railnetIbvSetSymbols(&table);
  LogCapture log;
  ASSERT_EQ(init(), ncclSuccess);
  EXPECT_EQ(ncclIbDevs[0].ar, 1);
  EXPECT_EQ(ncclIbRelaxedOrderingEnabled, 1);
  EXPECT_TRUE(LogCapture::contains("[2]rxe0:1/RoCE [RO]; OOB lo:")) << LogCapture::all();
  resetAll();
  env.set("NCCL_IB_PCI_RELAXED_ORDERING", "0");
  ASSERT_EQ(init(), ncclSuccess);
  EXPECT_EQ(ncclIbRelaxedOrderingEnabled, 0);
}

TEST_F(IbInitTest, IbHcaInAllItsForms) {
  standardWorld();
  EXPECT_EQ(withHca("mlx5"), "mlx5_1:1 mlx5_0:1");
  EXPECT_EQ(withHca("mlx5_0"), "mlx5_0:1");
  EXPECT_EQ(withHca("=mlx5"), "");  // exact: no device is called "mlx5"
  EXPECT_EQ(withHca("=mlx5_1,rxe0"), "mlx5_1:1 rxe0:1");
  EXPECT_EQ(withHca("^mlx5"), "rxe0:1");
  EXPECT_EQ(withHca("^=mlx5_0"), "mlx5_1:1 rxe0:1");
  EXPECT_EQ(withHca("mlx5_0:1,rxe0:1"), "mlx5_0:1 rxe0:1");
  EXPECT_EQ(withHca("mlx5_0:2"), "");  // port 2 is down
  EXPECT_EQ(withHca("^mlx5_0:1,rxe"), "mlx5_1:1");
  EXPECT_EQ(withHca(" mlx5_1 , rxe0 "), "mlx5_1:1 rxe0:1");
  {
    LogCapture log;
    EXPECT_EQ(withHca("mlx5_0:x"), "<init failed>");
    EXPECT_TRUE(LogCapture::contains("port \"x\" is not a number", NCCL_LOG_WARN)) << LogCapture::all();
  }
  {
    LogCapture log;
    EXPECT_EQ(withHca("nothing"), "");
    EXPECT_TRUE(LogCapture::contains("NET/IB : No device found.")) << LogCapture::all();
  }
}

TEST_F(IbInitTest, DisabledOrWithoutDevices) {
  {
    LogCapture log;
    ASSERT_EQ(init(), ncclSuccess);  // no HCA at all
    EXPECT_EQ(ndev(), 0);
    EXPECT_TRUE(LogCapture::contains("NET/IB : No device found.")) << LogCapture::all();
  }
  resetAll();
  standardWorld();
  env.set("NCCL_IB_DISABLE", "1");
  LogCapture log;
  EXPECT_EQ(init(), ncclInternalError);
  EXPECT_TRUE(LogCapture::contains("NET/IB : disabled by NCCL_IB_DISABLE=1")) << LogCapture::all();
}

TEST_F(IbInitTest, OpenFailureSkipsTheDevice) {
  standardWorld();
  w.hcas[1].openFails = true;
  LogCapture log;
  ASSERT_EQ(init(), ncclSuccess);
  EXPECT_EQ(names(), "mlx5_0:1 rxe0:1");
  EXPECT_TRUE(LogCapture::contains("NET/IB : Unable to open device mlx5_1", NCCL_LOG_WARN)) << LogCapture::all();
}

TEST_F(IbInitTest, MultiPortAndVirtualFunctionsGetRealPorts) {
  // a dual-port NIC as two PCI functions, and a VF of it
  addHca("mlx5_0", 1, IBV_LINK_LAYER_ETHERNET);
  pciLink("mlx5_0", "0000:17:00.0");
  addHca("mlx5_1", 1, IBV_LINK_LAYER_ETHERNET);
  pciLink("mlx5_1", "0000:17:00.1");
  addHca("mlx5_2", 1, IBV_LINK_LAYER_ETHERNET);
  pciLink("mlx5_2", "0000:17:01.2");
  ASSERT_EQ(init(), ncclSuccess);
  EXPECT_EQ(names(), "mlx5_0:1 mlx5_1:2 mlx5_2:3");
  ncclNetProperties_t p;
  ASSERT_EQ(railnetNetIb.getProperties(2, &p), ncclSuccess);
  EXPECT_NE(std::string(p.pciPath).find("/0000:17:00.0"), std::string::npos) << p.pciPath;  // VF merged
  resetAll();
  env.set("NCCL_IB_MERGE_VFS", "0");
  ASSERT_EQ(init(), ncclSuccess);
  EXPECT_EQ(names(), "mlx5_0:1 mlx5_1:2 mlx5_2:1");
  ASSERT_EQ(railnetNetIb.getProperties(2, &p), ncclSuccess);
  EXPECT_NE(std::string(p.pciPath).find("/0000:17:01.0"), std::string::npos) << p.pciPath;
}

TEST_F(IbInitTest, PciOrderCanBeTurnedOff) {
  standardWorld();
  env.set("NCCL_IB_DEVICE_PCI_ORDER", "0");
  ASSERT_EQ(init(), ncclSuccess);
  EXPECT_EQ(names(), "mlx5_0:1 mlx5_1:1 rxe0:1");
}

// ---------------------------------------------------------------- makeVDevice

TEST_F(IbInitTest, FusedDeviceSumsSpeedsAndNamesItsMembers) {
  standardWorld();
  addHca("rxe1", 1, IBV_LINK_LAYER_ETHERNET);  // EDR 4x
  ASSERT_EQ(init(), ncclSuccess);
  ASSERT_EQ(names(), "mlx5_1:1 mlx5_0:1 rxe0:1 rxe1:1");
  ncclNetVDeviceProps_t vp;
  memset(&vp, 0, sizeof(vp));
  vp.ndevs = 3;
  vp.devs[0] = 0;
  vp.devs[1] = 2;
  vp.devs[2] = 3;
  int d = -1;
  LogCapture log;
  ASSERT_EQ(railnetNetIb.makeVDevice(&d, &vp), ncclSuccess) << LogCapture::all();
  EXPECT_EQ(d, 4);
  EXPECT_EQ(ndev(), 5);
  ncclNetProperties_t p;
  ASSERT_EQ(railnetNetIb.getProperties(d, &p), ncclSuccess);
  EXPECT_STREQ(p.name, "mlx5_1+rxe0+rxe1");
  EXPECT_EQ(p.speed, 400000 + 10000 + 100000);
  EXPECT_EQ(p.vProps.ndevs, 3);
  EXPECT_EQ(p.vProps.devs[1], 2);
  EXPECT_EQ(p.guid, 0xbbbbu);  // the rest from the first member
  EXPECT_TRUE(LogCapture::contains("NET/IB : Made virtual device [4] name=mlx5_1+rxe0+rxe1 speed=510000 ndevs=3"))
      << LogCapture::all();
}

TEST_F(IbInitTest, MakeVDeviceRefusals) {
  standardWorld();
  ASSERT_EQ(init(), ncclSuccess);
  ncclNetVDeviceProps_t vp;
  int d = -1;
  auto refuse = [&](std::vector<int> devs, const std::string& warn) {
    memset(&vp, 0, sizeof(vp));
    vp.ndevs = (int)devs.size();
    for (size_t i = 0; i < devs.size() && i < NCCL_NET_MAX_DEVS_PER_NIC; i++) vp.devs[i] = devs[i];
    LogCapture log;
    EXPECT_EQ(railnetNetIb.makeVDevice(&d, &vp), ncclInvalidUsage) << warn;
    EXPECT_TRUE(LogCapture::contains(warn, NCCL_LOG_WARN)) << LogCapture::all();
  };
  refuse({0, 1}, "NET/IB : Attempted to merge incompatible devices: [0]mlx5_1:1/RoCE and [1]mlx5_0:1/IB. "
                 "Try selecting NICs of only one link type using NCCL_IB_HCA");
  refuse({0, 7}, "NET/IB : Cannot use physical device 7, max 3");
  refuse({-1, 0}, "NET/IB : Cannot use physical device -1, max 3");
  refuse({3}, "NET/IB : Cannot use physical device 3, max 3");
  refuse({}, "NET/IB : Can't make virtual NIC with 0 devices");
  refuse({0, 2, 0, 2, 0, 2, 0, 2, 0}, "NET/IB : Can't make virtual NIC with 9 devices, the maximum is 8");
  EXPECT_EQ(ndev(), 3);  // nothing was added
  {
    env.set("NCCL_IB_MERGE_NICS", "0");
    memset(&vp, 0, sizeof(vp));
    vp.ndevs = 2;
    vp.devs[0] = 0;
    vp.devs[1] = 2;
    LogCapture log;
    EXPECT_EQ(railnetNetIb.makeVDevice(&d, &vp), ncclInvalidUsage);
    EXPECT_TRUE(LogCapture::contains("NET/IB : Skipping makeVDevice, NCCL_IB_MERGE_NICS=0")) << LogCapture::all();
    vp.ndevs = 1;  // a single device is still fine
    EXPECT_EQ(railnetNetIb.makeVDevice(&d, &vp), ncclSuccess);
    env.unset("NCCL_IB_MERGE_NICS");
  }
  // up to the table's end, then a WARN
  memset(&vp, 0, sizeof(vp));
  vp.ndevs = 1;
  while (ndev() < MAX_IB_VDEVS) ASSERT_EQ(railnetNetIb.makeVDevice(&d, &vp), ncclSuccess);
  LogCapture log;
  EXPECT_EQ(railnetNetIb.makeVDevice(&d, &vp), ncclInvalidUsage);
  EXPECT_TRUE(LogCapture::contains("NET/IB : Cannot allocate any more virtual devices (256)", NCCL_LOG_WARN))
      << LogCapture::all();
}

TEST(IbVDeviceTest, MakeVDeviceBeforeInit) {
  railnetIbResetDevices();
  ncclNetVDeviceProps_t vp;
  memset(&vp, 0, sizeof(vp));
  vp.ndevs = 1;
  int d;
  LogCapture log;
  EXPECT_EQ(railnetNetIb.makeVDevice(&d, &vp), ncclInvalidUsage);
  EXPECT_TRUE(LogCapture::contains("makeVDevice before init", NCCL_LOG_WARN));
}

// ---------------------------------------------------------------- async events

TEST_F(IbInitTest, AsyncEventsAreLoggedAndFatalOnesFailComms) {
  standardWorld();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  w.hcas[2].ctx.async_fd = fds[0];  // rxe0
  ASSERT_EQ(init(), ncclSuccess);
  LogCapture log;
  auto post = [&](enum ibv_event_type t, int port) {
    struct ibv_async_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.event_type = t;
    ev.element.port_num = port;
    {
      std::lock_guard<std::mutex> g(w.evLock);
      w.events.push_back(ev);
    }
    ASSERT_EQ(write(fds[1], "x", 1), 1);
  };
  auto waitAcks = [&](int n) {
    for (int i = 0; i < 300; i++) {
      {
        std::lock_guard<std::mutex> g(w.evLock);
        if (w.acks >= n) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  post(IBV_EVENT_PORT_ERR, 1);
  ASSERT_TRUE(waitAcks(1));
  EXPECT_TRUE(LogCapture::contains("NET/IB : rxe0:1 Got non-fatal async event: port error(10)", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_EQ(ncclIbStatsCheckFatalCount(&ncclIbDevs[2].stats, "test"), ncclSuccess);
  // the port's comms look at it (liveness.c): its counter moved, the others' did not
  EXPECT_EQ(__atomic_load_n(&ncclIbDevs[2].stats.portErrors, __ATOMIC_ACQUIRE), 1u);
  EXPECT_EQ(__atomic_load_n(&ncclIbDevs[0].stats.portErrors, __ATOMIC_ACQUIRE), 0u);
  // a QP's fatal event is its comm's only: its number in the device's ring, nothing fatal
  // for the device's other comms
  struct ibv_qp qp;
  memset(&qp, 0, sizeof(qp));
  qp.qp_num = 4242;
  {
    struct ibv_async_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.event_type = IBV_EVENT_QP_FATAL;
    ev.element.qp = &qp;
    {
      std::lock_guard<std::mutex> g(w.evLock);
      w.events.push_back(ev);
    }
    ASSERT_EQ(write(fds[1], "x", 1), 1);
  }
  ASSERT_TRUE(waitAcks(2));
  EXPECT_TRUE(LogCapture::contains("qpn=4242", NCCL_LOG_WARN)) << LogCapture::all();
  EXPECT_EQ(__atomic_load_n(&ncclIbDevs[2].stats.qpErrors, __ATOMIC_ACQUIRE), 1u);
  EXPECT_EQ(ncclIbDevs[2].stats.qpErrorNums[0], 4242u);
  EXPECT_EQ(ncclIbStatsCheckFatalCount(&ncclIbDevs[2].stats, "test"), ncclSuccess);
  // two comms on that device (liveness.c): the one that owns QP 4242 fails with a WARN naming
  // it, the other goes on; both looked at the port after its PORT_ERR (ACTIVE: nothing to do)
  struct ibv_qp other;
  memset(&other, 0, sizeof(other));
  other.qp_num = 77;
  std::unique_ptr<ncclIbNetCommBase> owner(new ncclIbNetCommBase()), bystander(new ncclIbNetCommBase());
  struct ncclIbQp ownerQp = {}, bystanderQp = {};
  auto fakeComm = [&](ncclIbNetCommBase* b, struct ncclIbQp* q, struct ibv_qp* v) {
    memset(b, 0, sizeof(*b));
    b->isSend = 1;
    b->vProps.ndevs = 1;
    b->devs[0].ibDevN = 2;
    b->sock.fd = -1;
    q->qp = v;
    b->qps = q;
    b->nqps = 1;
  };
  fakeComm(owner.get(), &ownerQp, &qp);
  fakeComm(bystander.get(), &bystanderQp, &other);
  EXPECT_EQ(railnetIbDevicesCheck(bystander.get(), "test"), ncclSuccess) << LogCapture::all();
  EXPECT_EQ(bystander->failed, 0);
  EXPECT_EQ(bystander->devs[0].portErrSeen, 1u);
  EXPECT_EQ(railnetIbDevicesCheck(owner.get(), "test"), ncclRemoteError);
  EXPECT_EQ(owner->failed, 1);
  EXPECT_TRUE(LogCapture::contains("its QP qp_num=4242 got a fatal asynchronous event", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_EQ(railnetIbDevicesCheck(bystander.get(), "test"), ncclSuccess);
  post(IBV_EVENT_DEVICE_FATAL, 0);
  ASSERT_TRUE(waitAcks(3));
  EXPECT_TRUE(LogCapture::contains("NET/IB : rxe0 async fatal event: local catastrophic error", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_EQ(ncclIbStatsCheckFatalCount(&ncclIbDevs[2].stats, "ncclIbTest"), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("communicator encountered a fatal error (detected in ncclIbTest)", NCCL_LOG_WARN));
  EXPECT_EQ(ncclIbStatsCheckFatalCount(&ncclIbDevs[0].stats, "test"), ncclSuccess);  // other HCA
  env.set("NCCL_IB_RETURN_ASYNC_EVENTS", "0");
  EXPECT_EQ(ncclIbStatsCheckFatalCount(&ncclIbDevs[2].stats, "test"), ncclSuccess);
  for (void* c : ctxs) railnetNetIb.finalize(c);  // joins the threads
  ctxs.clear();
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
