// GPUDirect probing: peer-memory modules on sysfs trees made by the test ($SYSFS_PATH), and
// the DMA-BUF probe's errno classification through injected verbs.
#include "test_util.h"
#include <errno.h>
#include <string.h>
#include <atomic>
#include <map>
#include <thread>
#include <vector>

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "../../src/transport/net_ib/gdr.h"
#include "testing.h"
}

namespace {

const char* kNvMem = "kernel/mm/memory_peers/nv_mem/version";
const char* kNvMemNc = "kernel/mm/memory_peers/nv_mem_nc/version";
const char* kPeermem = "module/nvidia_peermem/version";

int countLines(const std::string& needle) {
  int n = 0;
  for (auto& l : LogCapture::lines()) n += l.msg.find(needle) != std::string::npos;
  return n;
}

struct PeermemTest : ::testing::Test {
  ScopedEnv env;
  TempDir dir;
  void SetUp() override {
    env.set("SYSFS_PATH", dir.path().c_str());
    railnetIbGdrReset();
  }
  void TearDown() override { railnetIbGdrReset(); }
};

// Every combination of the three files NCCL looks at.
TEST_F(PeermemTest, EveryCombinationOfModuleFiles) {
  for (int mask = 0; mask < 8; mask++) {
    SCOPED_TRACE("files mask " + std::to_string(mask));
    TempDir tree;
    if (mask & 1) tree.write(kNvMem, "1.1\n");
    if (mask & 2) tree.write(kNvMemNc, "1.1\n");
    if (mask & 4) tree.write(kPeermem, "560.35.03\n");
    tree.write("module/other/version", "1\n");  // noise
    env.set("SYSFS_PATH", tree.path().c_str());
    railnetIbGdrReset();
    LogCapture log;
    EXPECT_EQ(ncclIbGdrSupport(), mask != 0 ? ncclSuccess : ncclSystemError);
    EXPECT_EQ(ncclIbPeerMemSupport(), (mask & 4) ? ncclSuccess : ncclSystemError);
    EXPECT_EQ(ncclIbGdrSupport(), mask != 0 ? ncclSuccess : ncclSystemError);
    EXPECT_EQ(countLines("NET/IB"), 1) << LogCapture::all();  // decided and told once
    if (mask == 0) {
      EXPECT_TRUE(LogCapture::contains("no GPU Direct RDMA peer memory module")) << LogCapture::all();
      EXPECT_TRUE(LogCapture::contains(tree.path()));
    } else {
      EXPECT_EQ(LogCapture::contains("nvidia_peermem"), (mask & 4) != 0) << LogCapture::all();
      EXPECT_EQ(LogCapture::contains(" nv_mem (nv_peer_mem)"), (mask & 1) != 0) << LogCapture::all();
      EXPECT_EQ(LogCapture::contains("nv_mem_nc"), (mask & 2) != 0) << LogCapture::all();
    }
  }
}

TEST_F(PeermemTest, DirectoryWithoutVersionFileIsNotAModule) {
  dir.write("module/nvidia_peermem/refcnt", "0\n");
  dir.write("kernel/mm/memory_peers/README", "x\n");
  EXPECT_EQ(ncclIbGdrSupport(), ncclSystemError);
  EXPECT_EQ(ncclIbPeerMemSupport(), ncclSystemError);
}

TEST_F(PeermemTest, TrailingSlashInSysfsPath) {
  dir.write(kPeermem, "1\n");
  env.set("SYSFS_PATH", (dir.path() + "//").c_str());
  EXPECT_EQ(ncclIbPeerMemSupport(), ncclSuccess);
}

TEST_F(PeermemTest, DecidedOncePerProcess) {
  dir.write(kPeermem, "1\n");
  EXPECT_EQ(ncclIbGdrSupport(), ncclSuccess);
  // the module goes away (and SYSFS_PATH changes): the answer stays until a reset
  env.set("SYSFS_PATH", "/nonexistent-railnet-sysfs");
  EXPECT_EQ(ncclIbGdrSupport(), ncclSuccess);
  EXPECT_EQ(ncclIbPeerMemSupport(), ncclSuccess);
  railnetIbGdrReset();
  EXPECT_EQ(ncclIbGdrSupport(), ncclSystemError);
}

TEST_F(PeermemTest, ConcurrentFirstCallsDecideOnce) {
  dir.write(kNvMem, "1\n");
  LogCapture log;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; i++)
    threads.emplace_back([&] {
      if (ncclIbGdrSupport() == ncclSuccess && ncclIbPeerMemSupport() == ncclSystemError) ok++;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(countLines("peer memory module"), 1) << LogCapture::all();
}

// ---- DMA-BUF probe
struct DmaFake {
  std::map<struct ibv_context*, int> errnoOf;  // what reg_dmabuf_mr answers per device
  bool allocFails = false;
  bool deallocFails = false;
  bool regSucceeds = false;
  std::atomic<int> probes{0}, pdsAlive{0}, deregs{0};
};
DmaFake* dma;
struct ibv_device devs[4];
struct ibv_context ctxs[4];
struct ibv_pd pds[4];
struct ibv_mr mr;

struct ibv_pd* dAllocPd(struct ibv_context* c) {
  if (dma->allocFails) {
    errno = ENOMEM;
    return nullptr;
  }
  dma->pdsAlive++;
  struct ibv_pd* pd = &pds[c - ctxs];
  pd->context = c;
  return pd;
}
int dDeallocPd(struct ibv_pd*) {
  if (dma->deallocFails) return EBUSY;
  dma->pdsAlive--;
  return 0;
}
struct ibv_mr* dRegDmabufMr(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
  dma->probes++;
  EXPECT_EQ(offset, 0u);
  EXPECT_EQ(length, 0u);
  EXPECT_EQ(iova, 0u);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(access, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // widen any race
  if (dma->regSucceeds) return &mr;
  errno = dma->errnoOf[pd->context];
  return nullptr;
}
int dDeregMr(struct ibv_mr*) {
  dma->deregs++;
  return 0;
}
const char* dDevName(struct ibv_device* d) {
  static const char* names[] = {"mlx5_0", "mlx5_1", "rxe0", "rxe1"};
  return names[d - devs];
}

struct DmaBufTest : ::testing::Test {
  DmaFake fakeState;
  struct railnetIbvSymbols table;
  void SetUp() override {
    dma = &fakeState;
    memset(&table, 0, sizeof(table));
    table.alloc_pd = dAllocPd;
    table.dealloc_pd = dDeallocPd;
    table.reg_dmabuf_mr = dRegDmabufMr;
    table.dereg_mr = dDeregMr;
    table.get_device_name = dDevName;
    railnetIbvSetSymbols(&table);
    for (int i = 0; i < 4; i++) {
      memset(&ctxs[i], 0, sizeof(ctxs[i]));
      ctxs[i].device = &devs[i];
    }
    railnetIbGdrReset();
  }
  void TearDown() override {
    railnetIbvSetSymbols(nullptr);
    railnetIbGdrReset();
    dma = nullptr;
  }
};

TEST_F(DmaBufTest, ErrnoClassification) {
  struct Case { int err; int expect; const char* text; };
  const Case cases[] = {
      {EOPNOTSUPP, 0, "not supported (ibv_reg_dmabuf_mr probe: Operation not supported)"},
      {EPROTONOSUPPORT, 0, "not supported (ibv_reg_dmabuf_mr probe: Protocol not supported)"},
      {EBADF, 1, "supported (ibv_reg_dmabuf_mr probe: Bad file descriptor)"},
      {EINVAL, 1, "supported (ibv_reg_dmabuf_mr probe: Invalid argument)"},  // as NCCL: only the two above say no
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    LogCapture log;
    fakeState.errnoOf[&ctxs[0]] = c.err;
    int seen = -2;
    EXPECT_EQ(railnetIbDmaBufProbe(&ctxs[0], &seen), c.expect);
    EXPECT_EQ(seen, c.err);
    EXPECT_TRUE(LogCapture::contains(std::string("NET/IB : mlx5_0 DMA-BUF ") + c.text)) << LogCapture::all();
    EXPECT_EQ(fakeState.pdsAlive.load(), 0);  // the PD is always freed
  }
}

TEST_F(DmaBufTest, VerbMissingFromLibibverbsMeansUnsupported) {
  table.reg_dmabuf_mr = nullptr;
  railnetIbvSetSymbols(&table);
  int seen = 0;
  EXPECT_EQ(railnetIbDmaBufProbe(&ctxs[1], &seen), 0);
  EXPECT_EQ(seen, EOPNOTSUPP);
  EXPECT_EQ(ncclIbDmaBufSupport(1, &ctxs[1]), ncclSystemError);
}

TEST_F(DmaBufTest, ProbeFailuresCountAsUnsupported) {
  LogCapture log;
  fakeState.allocFails = true;
  EXPECT_EQ(railnetIbDmaBufProbe(&ctxs[0], nullptr), -1);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_alloc_pd failed with error Cannot allocate memory"));
  EXPECT_EQ(ncclIbDmaBufSupport(0, &ctxs[0]), ncclSystemError);
  EXPECT_EQ(fakeState.probes.load(), 0);
  fakeState.allocFails = false;
  fakeState.deallocFails = true;
  fakeState.errnoOf[&ctxs[1]] = EBADF;
  EXPECT_EQ(railnetIbDmaBufProbe(&ctxs[1], nullptr), -1);
  EXPECT_EQ(ncclIbDmaBufSupport(1, &ctxs[1]), ncclSystemError);
}

TEST_F(DmaBufTest, UnexpectedSuccessIsSupportedAndTheRegionIsReleased) {
  fakeState.regSucceeds = true;
  int seen = -1;
  EXPECT_EQ(railnetIbDmaBufProbe(&ctxs[2], &seen), 1);
  EXPECT_EQ(seen, 0);
  EXPECT_EQ(fakeState.deregs.load(), 1);
}

TEST_F(DmaBufTest, RememberedPerDevice) {
  fakeState.errnoOf[&ctxs[0]] = EBADF;
  fakeState.errnoOf[&ctxs[2]] = EOPNOTSUPP;
  EXPECT_EQ(ncclIbDmaBufSupport(0, &ctxs[0]), ncclSuccess);
  EXPECT_EQ(ncclIbDmaBufSupport(2, &ctxs[2]), ncclSystemError);
  EXPECT_EQ(fakeState.probes.load(), 2);
  // the answers stick even if the device would now answer differently
  fakeState.errnoOf[&ctxs[0]] = EOPNOTSUPP;
  fakeState.errnoOf[&ctxs[2]] = EBADF;
  EXPECT_EQ(ncclIbDmaBufSupport(0, &ctxs[0]), ncclSuccess);
  EXPECT_EQ(ncclIbDmaBufSupport(2, &ctxs[2]), ncclSystemError);
  EXPECT_EQ(fakeState.probes.load(), 2);
  railnetIbGdrReset();
  EXPECT_EQ(ncclIbDmaBufSupport(0, &ctxs[0]), ncclSystemError);
}

TEST_F(DmaBufTest, ConcurrentCallersProbeEachDeviceOnce) {
  for (int i = 0; i < 4; i++) fakeState.errnoOf[&ctxs[i]] = (i % 2) ? EOPNOTSUPP : EBADF;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; t++)
    threads.emplace_back([&, t] {
      int d = t % 4;
      ncclResult_t want = (d % 2) ? ncclSystemError : ncclSuccess;
      for (int k = 0; k < 3; k++)
        if (ncclIbDmaBufSupport(d, &ctxs[d]) != want) wrong++;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fakeState.probes.load(), 4);
}

TEST_F(DmaBufTest, DeviceIndexOutOfRange) {
  LogCapture log;
  EXPECT_EQ(ncclIbDmaBufSupport(-1, &ctxs[0]), ncclInternalError);
  EXPECT_EQ(ncclIbDmaBufSupport(RAILNET_GDR_MAX_DEVS, &ctxs[0]), ncclInternalError);
  EXPECT_TRUE(LogCapture::contains("DMA-BUF support asked for device -1"));
  EXPECT_EQ(fakeState.probes.load(), 0);
}

}  // namespace
