// ibvwrap and the GPUDirect probes against a real verbs stack (soft-RoCE in the tier's VM,
// or the host's own RDMA devices). Skips when libibverbs lists no device.
//  - the DMA-BUF probe on each device: what it answers is recorded and must be handled;
//  - ibv_reg_mr of a buffer larger than a lowered RLIMIT_MEMLOCK (CAP_IPC_LOCK dropped, since
//    it bypasses the limit) fails with the memlock HINT;
//  - ibv_modify_qp to RTR with a GID index whose slot is empty fails with the GID HINT
//    (rxe answers ENODATA there, other stacks EINVAL), and succeeds with a good index.
#include "test_util.h"
#include "caps.h"
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "../../src/transport/net_ib/gdr.h"
#include "testing.h"
}

namespace {

struct Device {
  std::string name;
  struct ibv_device* dev;
};

bool isZeroGid(const union ibv_gid& g) {
  for (int i = 0; i < 16; i++)
    if (g.raw[i]) return false;
  return true;
}

bool isIpv4MappedGid(const union ibv_gid& g) {
  for (int i = 0; i < 10; i++)
    if (g.raw[i]) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

std::string gidStr(const union ibv_gid& g) {
  char buf[INET6_ADDRSTRLEN] = "?";
  ibvGetGidStr(&g, buf, sizeof(buf));
  return buf;
}

// A readable GID (the IPv4-mapped one when there is one), its index through *index.
bool goodGid(struct ibv_context* ctx, int* index, union ibv_gid* gid) {
  int firstNonZero = -1;
  union ibv_gid g, first;
  for (int i = 0; i < 16; i++) {
    if (railnetIbv.query_gid(ctx, 1, i, &g) != 0 || isZeroGid(g)) continue;
    if (isIpv4MappedGid(g)) {
      *index = i;
      *gid = g;
      return true;
    }
    if (firstNonZero < 0) {
      firstNonZero = i;
      first = g;
    }
  }
  if (firstNonZero < 0) return false;
  *index = firstNonZero;
  *gid = first;
  return true;
}

// The first slot whose GID cannot be read or is zero: an index that does not exist.
int emptyGidIndex(struct ibv_context* ctx, int tableLen) {
  union ibv_gid g;
  for (int i = 0; i < tableLen && i < 256; i++)
    if (railnetIbv.query_gid(ctx, 1, i, &g) != 0 || isZeroGid(g)) return i;
  return -1;
}

struct SoftRoceIbv : ::testing::Test {
  ScopedEnv env;
  std::vector<Device> devices;
  struct ibv_device** list = nullptr;

  void SetUp() override {
    if (wrap_ibv_symbols() != ncclSuccess) RAILNET_SKIP("libibverbs cannot be loaded: no RDMA here");
    int n = 0;
    ASSERT_EQ(wrap_ibv_get_device_list(&list, &n), ncclSuccess);
    if (list == nullptr || n == 0) RAILNET_SKIP("no RDMA device (ibv device list empty)");
    for (int i = 0; i < n; i++) devices.push_back({wrap_ibv_get_device_name(list[i]), list[i]});
    env.set("NCCL_IB_MQP_RETRY_CNT", "2");
    env.set("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "10");
  }
  void TearDown() override {
    if (list) wrap_ibv_free_device_list(list);
  }
};

TEST_F(SoftRoceIbv, DmaBufProbeOnEveryDevice) {
  railnetIbGdrReset();
  for (size_t i = 0; i < devices.size(); i++) {
    SCOPED_TRACE(devices[i].name);
    struct ibv_context* ctx = nullptr;
    ASSERT_EQ(wrap_ibv_open_device(&ctx, devices[i].dev), ncclSuccess);
    LogCapture log;
    int err = -1;
    int answer = railnetIbDmaBufProbe(ctx, &err);
    printf("%s: ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0) -> errno %d (%s): DMA-BUF %s\n", devices[i].name.c_str(), err,
           strerror(err), answer == 1 ? "supported" : answer == 0 ? "not supported" : "probe failed");
    RecordProperty("dmabuf_" + devices[i].name, std::to_string(err) + " " + strerror(err));
    ASSERT_NE(answer, -1) << LogCapture::all();  // the PD came and went
    EXPECT_EQ(answer, (err == EOPNOTSUPP || err == EPROTONOSUPPORT) ? 0 : 1);
    EXPECT_TRUE(LogCapture::contains("NET/IB : " + devices[i].name + " DMA-BUF")) << LogCapture::all();
    EXPECT_EQ(LogCapture::contains("", NCCL_LOG_WARN), false) << LogCapture::all();
    // the cached answer agrees, and stays
    ncclResult_t want = answer == 1 ? ncclSuccess : ncclSystemError;
    EXPECT_EQ(ncclIbDmaBufSupport((int)i, ctx), want);
    EXPECT_EQ(ncclIbDmaBufSupport((int)i, ctx), want);
    EXPECT_EQ(wrap_ibv_close_device(ctx), ncclSuccess);
  }
  railnetIbGdrReset();
}

// In a child: register 4 MiB (works), drop CAP_IPC_LOCK, lower RLIMIT_MEMLOCK to 64 KiB, then
// register again (must fail with the hint). Exit code 0 = as expected; the log comes back on fd.
int memlockChild(struct ibv_device* dev, int fd) {
  std::string out;
  int status = 0;
  LogCapture log;
  struct ibv_context* ctx = nullptr;
  struct ibv_pd* pd = nullptr;
  struct ibv_mr* mr = nullptr;
  const size_t len = 4 << 20;
  void* buf = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::string why;
  struct rlimit low = {64 * 1024, 64 * 1024};
  if (buf == MAP_FAILED || wrap_ibv_open_device(&ctx, dev) != ncclSuccess || wrap_ibv_alloc_pd(&pd, ctx) != ncclSuccess) {
    out += "setup failed\n";
    status = 2;
    goto done;
  }
  memset(buf, 1, len);
  if (wrap_ibv_reg_mr(&mr, pd, buf, len, IBV_ACCESS_LOCAL_WRITE) == ncclSuccess) {
    out += "control: 4 MiB registered with the original limits\n";
    wrap_ibv_dereg_mr(mr);
    mr = nullptr;
  } else {
    out += "control: 4 MiB could not be registered even with the original limits\n";
  }
  if (!dropIpcLock(&why)) {
    out += "cannot drop CAP_IPC_LOCK: " + why + "\n";
    status = 3;
    goto done;
  }
  if (setrlimit(RLIMIT_MEMLOCK, &low) != 0) {
    out += std::string("setrlimit: ") + strerror(errno) + "\n";
    status = 4;
    goto done;
  }
  // the system call itself: AddressSanitizer replaces mlock() with a no-op that succeeds
  if (syscall(SYS_mlock, buf, len) == 0) {
    out += "mlock of 4 MiB still works: the limit is not enforced on this process\n";
    syscall(SYS_munlock, buf, len);
    status = 5;
    goto done;
  }
  LogCapture::lines().clear();
  if (wrap_ibv_reg_mr(&mr, pd, buf, len, IBV_ACCESS_LOCAL_WRITE) == ncclSuccess) {
    out += "ibv_reg_mr of 4 MiB succeeded under a 64 KiB memlock limit\n";
    wrap_ibv_dereg_mr(mr);
    status = 6;
    goto done;
  }
  if (!LogCapture::contains("Call to ibv_reg_mr failed with error", NCCL_LOG_WARN)) status = 7;
  if (!LogCapture::contains("HINT: ibv_reg_mr failed with") ||
      !LogCapture::contains("this process may lock only 64 KiB (RLIMIT_MEMLOCK soft limit; hard limit 64 KiB)") ||
      !LogCapture::contains("add '* soft memlock unlimited' and '* hard memlock unlimited' to "
                            "/etc/security/limits.conf"))
    status = 8;
done:
  out += LogCapture::all();
  if (pd) wrap_ibv_dealloc_pd(pd);
  if (ctx) wrap_ibv_close_device(ctx);
  if (write(fd, out.data(), out.size()) < 0) status = 9;
  return status;
}

TEST_F(SoftRoceIbv, RegMrBeyondMemlockLimitGivesTheHint) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  fflush(stdout);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pipefd[0]);
    int st = memlockChild(devices[0].dev, pipefd[1]);
    close(pipefd[1]);
    _exit(st);
  }
  close(pipefd[1]);
  std::string out;
  char buf[4096];
  ssize_t r;
  while ((r = read(pipefd[0], buf, sizeof(buf))) > 0) out.append(buf, (size_t)r);
  close(pipefd[0]);
  int wst = 0;
  ASSERT_EQ(waitpid(pid, &wst, 0), pid);
  printf("%s: memlock child:\n%s", devices[0].name.c_str(), out.c_str());
  ASSERT_TRUE(WIFEXITED(wst)) << out;
  EXPECT_EQ(WEXITSTATUS(wst), 0) << out;
}

struct Verbs {
  struct ibv_context* ctx = nullptr;
  struct ibv_pd* pd = nullptr;
  struct ibv_cq* cq = nullptr;
  struct ibv_qp* qp = nullptr;
  ~Verbs() {
    if (qp) wrap_ibv_destroy_qp(qp);
    if (cq) wrap_ibv_destroy_cq(cq);
    if (pd) wrap_ibv_dealloc_pd(pd);
    if (ctx) wrap_ibv_close_device(ctx);
  }
  ncclResult_t openQpInInit(struct ibv_device* dev) {
    NCCLCHECK(wrap_ibv_open_device(&ctx, dev));
    NCCLCHECK(wrap_ibv_alloc_pd(&pd, ctx));
    NCCLCHECK(wrap_ibv_create_cq(&cq, ctx, 16, nullptr, nullptr, 0));
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof(init));
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 4;
    init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    NCCLCHECK(wrap_ibv_create_qp(&qp, pd, &init));
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    return wrap_ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }
  ncclResult_t toRtr(int sgidIndex, const union ibv_gid& dgid, uint32_t destQpn) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = destQpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = (uint8_t)sgidIndex;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.port_num = 1;
    return wrap_ibv_modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  }
};

TEST_F(SoftRoceIbv, ModifyQpToRtrWithAMissingGidIndexGivesTheGidHint) {
  Verbs local, peer;
  ASSERT_EQ(local.openQpInInit(devices[0].dev), ncclSuccess);
  // the remote end: the second device when there is one (rxe1 on the tier's veth), else ourselves
  ASSERT_EQ(peer.openQpInInit(devices[devices.size() > 1 ? 1 : 0].dev), ncclSuccess);
  struct ibv_port_attr port;
  ASSERT_EQ(wrap_ibv_query_port(local.ctx, 1, &port), ncclSuccess);
  int goodIndex = -1, peerIndex = -1;
  union ibv_gid goodGidValue, peerGid;
  ASSERT_TRUE(goodGid(local.ctx, &goodIndex, &goodGidValue)) << "no readable GID on " << devices[0].name;
  ASSERT_TRUE(goodGid(peer.ctx, &peerIndex, &peerGid));
  int bad = emptyGidIndex(local.ctx, port.gid_tbl_len);
  if (bad < 0) RAILNET_SKIP("every GID slot below 256 is populated on " + devices[0].name);
  printf("%s: gid_tbl_len %d, good GID index %d (%s), empty GID index %d; peer GID %s\n", devices[0].name.c_str(),
         port.gid_tbl_len, goodIndex, gidStr(goodGidValue).c_str(), bad, gidStr(peerGid).c_str());

  {
    LogCapture log;
    EXPECT_EQ(local.toRtr(bad, peerGid, peer.qp->qp_num), ncclSystemError);
    printf("%s", LogCapture::all().c_str());
    bool einval = LogCapture::contains("Call to ibv_modify_qp failed with 22 Invalid argument", NCCL_LOG_WARN);
    bool enodata = LogCapture::contains("Call to ibv_modify_qp failed with 61 No data available", NCCL_LOG_WARN);
    EXPECT_TRUE(einval || enodata) << LogCapture::all();
    RecordProperty("modify_qp_bad_gid_errno", einval ? "EINVAL" : enodata ? "ENODATA" : "other");
    EXPECT_TRUE(LogCapture::contains("local GID index " + std::to_string(bad))) << LogCapture::all();
    EXPECT_TRUE(LogCapture::contains(
        "HINT: In many cases this error occurs when the incorrect GID index is forced by NCCL_IB_GID_INDEX"));
    EXPECT_TRUE(LogCapture::contains(
        "HINT: To confirm and fix the problem, set NCCL_IB_GID_INDEX=-1 (or unset it) to enable automatic detection"));
    EXPECT_FALSE(LogCapture::contains("retrying")) << "EINVAL/ENODATA must not be retried";
  }
  {
    LogCapture log;
    EXPECT_EQ(local.toRtr(goodIndex, peerGid, peer.qp->qp_num), ncclSuccess) << LogCapture::all();
    EXPECT_FALSE(LogCapture::contains("HINT"));
  }
}

}  // namespace
