// ibvwrap: the real wrap_ibv_* code driven through an injected table of fake verbs.
#include "test_util.h"
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <vector>

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "testing.h"
}

namespace {

// What the fakes return and what they saw.
struct Fake {
  int errnoToSet = 0;       // errno for the next failing pointer call
  bool fail = false;        // pointer calls return NULL, int calls return intRet
  int intRet = 0;
  std::vector<int> modifyResults;  // consumed one per call; 0 once empty
  std::vector<uint64_t> modifyTimesNs;
  int ackCalls = 0;
  ssize_t gidTableRet = 0;
};
Fake fake;

struct ibv_pd fakePd;
struct ibv_mr fakeMr;
struct ibv_cq fakeCq;
struct ibv_qp fakeQpObj;
struct ibv_context fakeCtx;
struct ibv_device fakeDev;

template <typename T>
T* ptrResult(T* ok) {
  if (fake.fail) {
    errno = fake.errnoToSet;
    return nullptr;
  }
  return ok;
}
int intResult() {
  if (fake.intRet == -1) errno = fake.errnoToSet;
  return fake.intRet;
}

struct ibv_pd* fAllocPd(struct ibv_context*) { return ptrResult(&fakePd); }
int fDeallocPd(struct ibv_pd*) { return intResult(); }
struct ibv_mr* fRegMr(struct ibv_pd*, void*, size_t, int) { return ptrResult(&fakeMr); }
struct ibv_mr* fRegMrIova2(struct ibv_pd*, void*, size_t, uint64_t, unsigned int) { return ptrResult(&fakeMr); }
struct ibv_cq* fCreateCq(struct ibv_context*, int, void*, struct ibv_comp_channel*, int) { return ptrResult(&fakeCq); }
struct ibv_qp* fCreateQp(struct ibv_pd*, struct ibv_qp_init_attr*) { return ptrResult(&fakeQpObj); }
struct ibv_context* fOpenDevice(struct ibv_device*) { return ptrResult(&fakeCtx); }
int fCloseDevice(struct ibv_context*) { return intResult(); }
int fQueryDevice(struct ibv_context*, struct ibv_device_attr*) { return intResult(); }
int fQueryPort(struct ibv_context*, uint8_t, struct ibv_port_attr* a) {
  a->state = IBV_PORT_ACTIVE;
  return intResult();
}
int fQueryGid(struct ibv_context*, uint8_t, int index, union ibv_gid* gid) {
  memset(gid, 0, sizeof(*gid));
  gid->raw[15] = (uint8_t)index;
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  return 0;
}
int fQueryQp(struct ibv_qp*, struct ibv_qp_attr* a, int, struct ibv_qp_init_attr*) {
  memset(a, 0, sizeof(*a));
  a->port_num = 1;
  return 0;
}
int fModifyQp(struct ibv_qp*, struct ibv_qp_attr*, int) {
  fake.modifyTimesNs.push_back(railnetClockNs());
  if (fake.modifyResults.empty()) return 0;
  int r = fake.modifyResults.front();
  fake.modifyResults.erase(fake.modifyResults.begin());
  return r;
}
void fAckAsyncEvent(struct ibv_async_event*) { fake.ackCalls++; }
int fQueryEce(struct ibv_qp*, struct ibv_ece*) { return intResult(); }
ssize_t fQueryGidTable(struct ibv_context*, struct ibv_gid_entry*, size_t, uint32_t, size_t) {
  return fake.gidTableRet;
}
struct ibv_device** fGetDeviceList(int* n) {
  *n = 7;  // the wrapper must reset it when the list is NULL
  errno = ENOSYS;
  return nullptr;
}
const char* fGetDeviceName(struct ibv_device*) { return "fake0"; }
const char* fWcStatusStr(enum ibv_wc_status) { return "fake status"; }

struct railnetIbvSymbols fakeTable() {
  struct railnetIbvSymbols t;
  memset(&t, 0, sizeof(t));
  t.alloc_pd = fAllocPd;
  t.dealloc_pd = fDeallocPd;
  t.reg_mr = fRegMr;
  t.create_cq = fCreateCq;
  t.create_qp = fCreateQp;
  t.open_device = fOpenDevice;
  t.close_device = fCloseDevice;
  t.query_device = fQueryDevice;
  t.query_port = fQueryPort;
  t.query_gid = fQueryGid;
  t.query_qp = fQueryQp;
  t.modify_qp = fModifyQp;
  t.ack_async_event = fAckAsyncEvent;
  t.get_device_list = fGetDeviceList;
  t.get_device_name = fGetDeviceName;
  return t;
}

struct IbvWrapTest : ::testing::Test {
  ScopedEnv env;
  struct railnetIbvSymbols table = fakeTable();
  void SetUp() override {
    fake = Fake();
    env.unset("NCCL_IB_MQP_RETRY_ALL");
    env.unset("NCCL_IB_MQP_RETRY_CNT");
    env.unset("NCCL_IB_MQP_RETRY_SLEEP_MSEC");
    env.unset("NCCL_IBVERBS_LIB");
    railnetIbvSetSymbols(&table);
    fakeDev = ibv_device();
    fakeCtx = ibv_context();
    fakeCtx.device = &fakeDev;
    fakePd = ibv_pd();
    fakePd.context = &fakeCtx;
    fakeQpObj = ibv_qp();
    fakeQpObj.context = &fakeCtx;
    fakeQpObj.pd = &fakePd;
    fakeQpObj.state = IBV_QPS_INIT;
  }
  void TearDown() override {
    railnetIbvSetSymbols(nullptr);
    railnetIbvSetLibNames(nullptr);
  }
  void inject() { railnetIbvSetSymbols(&table); }
};

int countLines(const std::string& needle, int level = -1) {
  int n = 0;
  for (auto& l : LogCapture::lines())
    if ((level < 0 || l.level == level) && l.msg.find(needle) != std::string::npos) n++;
  return n;
}

// ---- IBV_PTR_CHECK_ERRNO
TEST_F(IbvWrapTest, PtrCheckSuccessReturnsThePointerSilently) {
  LogCapture log;
  struct ibv_pd* pd = nullptr;
  EXPECT_EQ(wrap_ibv_alloc_pd(&pd, &fakeCtx), ncclSuccess);
  EXPECT_EQ(pd, &fakePd);
  EXPECT_EQ(countLines("", NCCL_LOG_WARN), 0) << LogCapture::all();
}

TEST_F(IbvWrapTest, PtrCheckFailureWarnsWithStrerror) {
  LogCapture log;
  fake.fail = true;
  fake.errnoToSet = ENODEV;
  struct ibv_pd* pd = nullptr;
  EXPECT_EQ(wrap_ibv_alloc_pd(&pd, &fakeCtx), ncclSystemError);
  EXPECT_EQ(pd, nullptr);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_alloc_pd failed with error No such device", NCCL_LOG_WARN))
      << LogCapture::all();
  struct ibv_context* ctx = nullptr;
  EXPECT_EQ(wrap_ibv_open_device(&ctx, &fakeDev), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_open_device failed with error No such device", NCCL_LOG_WARN));
  // not a memlock-style error: no hint
  EXPECT_FALSE(LogCapture::contains("HINT")) << LogCapture::all();
}

// ---- IBV_INT_CHECK_RET_ERRNO
TEST_F(IbvWrapTest, IntCheckRetErrnoReportsTheReturnedErrno) {
  LogCapture log;
  struct ibv_device_attr attr;
  EXPECT_EQ(wrap_ibv_query_device(&fakeCtx, &attr), ncclSuccess);
  EXPECT_EQ(countLines("", NCCL_LOG_WARN), 0);
  fake.intRet = EINVAL;
  EXPECT_EQ(wrap_ibv_query_device(&fakeCtx, &attr), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_query_device failed with error Invalid argument errno 22",
                                   NCCL_LOG_WARN))
      << LogCapture::all();
}

TEST_F(IbvWrapTest, IntCheckRetErrnoTakesErrnoWhenTheVerbReturnsMinusOne) {
  LogCapture log;
  fake.intRet = -1;
  fake.errnoToSet = EBUSY;
  EXPECT_EQ(wrap_ibv_dealloc_pd(&fakePd), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_dealloc_pd failed with error Device or resource busy errno 16",
                                   NCCL_LOG_WARN))
      << LogCapture::all();
}

// ---- IBV_INT_CHECK
TEST_F(IbvWrapTest, IntCheckMinusOneIsFailure) {
  LogCapture log;
  EXPECT_EQ(wrap_ibv_close_device(&fakeCtx), ncclSuccess);
  fake.intRet = -1;
  EXPECT_EQ(wrap_ibv_close_device(&fakeCtx), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_close_device failed", NCCL_LOG_WARN)) << LogCapture::all();
}

// ---- IBV_PASSTHRU
TEST_F(IbvWrapTest, PassThroughCallsTheVerb) {
  struct ibv_async_event ev;
  EXPECT_EQ(wrap_ibv_ack_async_event(&ev), ncclSuccess);
  EXPECT_EQ(fake.ackCalls, 1);
}

// ---- a verb the table lacks
TEST_F(IbvWrapTest, MissingRequiredVerbIsAnInternalError) {
  LogCapture log;
  table.alloc_pd = nullptr;
  table.ack_async_event = nullptr;
  inject();
  struct ibv_pd* pd;
  EXPECT_EQ(wrap_ibv_alloc_pd(&pd, &fakeCtx), ncclInternalError);
  EXPECT_TRUE(LogCapture::contains("lib wrapper not initialized: ibv_alloc_pd", NCCL_LOG_WARN)) << LogCapture::all();
  struct ibv_async_event ev;
  EXPECT_EQ(wrap_ibv_ack_async_event(&ev), ncclInternalError);
}

// ---- IBV_INT_CHECK_RET_ERRNO_OPTIONAL
TEST_F(IbvWrapTest, OptionalVerbAbsentIsUnsupportedNotAFailure) {
  LogCapture log;
  int supported = -1;
  struct ibv_ece ece;
  EXPECT_EQ(wrap_ibv_query_ece(&fakeQpObj, &ece, &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_query_ece skipped", NCCL_LOG_INFO)) << LogCapture::all();
  EXPECT_EQ(countLines("", NCCL_LOG_WARN), 0);
}

TEST_F(IbvWrapTest, OptionalVerbAnsweringNotSupported) {
  table.query_ece = fQueryEce;
  table.set_ece = fQueryEce;
  inject();
  for (int e : {EOPNOTSUPP, ENOTSUP, -EOPNOTSUPP}) {
    LogCapture log;
    fake.intRet = e;
    int supported = -1;
    struct ibv_ece ece;
    EXPECT_EQ(wrap_ibv_set_ece(&fakeQpObj, &ece, &supported), ncclSuccess);
    EXPECT_EQ(supported, 0);
    EXPECT_TRUE(LogCapture::contains("Call to ibv_set_ece not supported", NCCL_LOG_INFO)) << LogCapture::all();
  }
}

TEST_F(IbvWrapTest, OptionalVerbSuccessAndRealFailure) {
  LogCapture log;
  table.query_ece = fQueryEce;
  inject();
  int supported = -1;
  struct ibv_ece ece;
  EXPECT_EQ(wrap_ibv_query_ece(&fakeQpObj, &ece, &supported), ncclSuccess);
  EXPECT_EQ(supported, 1);
  fake.intRet = EIO;
  supported = -1;
  EXPECT_EQ(wrap_ibv_query_ece(&fakeQpObj, &ece, &supported), ncclSystemError);
  EXPECT_EQ(supported, 1);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_query_ece failed with error Input/output error errno 5", NCCL_LOG_WARN))
      << LogCapture::all();
}

TEST_F(IbvWrapTest, GidTableQuery) {
  LogCapture log;
  struct ibv_gid_entry entries[4];
  ssize_t n = -1;
  int supported = -1;
  EXPECT_EQ(wrap_ibv_query_gid_table(&fakeCtx, entries, 4, &n, &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  table.query_gid_table = fQueryGidTable;
  inject();
  fake.gidTableRet = 3;
  EXPECT_EQ(wrap_ibv_query_gid_table(&fakeCtx, entries, 4, &n, &supported), ncclSuccess);
  EXPECT_EQ(supported, 1);
  EXPECT_EQ(n, 3);
  fake.gidTableRet = -EOPNOTSUPP;
  EXPECT_EQ(wrap_ibv_query_gid_table(&fakeCtx, entries, 4, &n, &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  fake.gidTableRet = -ENOMEM;
  EXPECT_EQ(wrap_ibv_query_gid_table(&fakeCtx, entries, 4, &n, &supported), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_query_gid_table failed with error Cannot allocate memory errno 12"));
}

// ---- optional registration verbs
TEST_F(IbvWrapTest, RegMrIova2PresenceAndDmaBufAbsence) {
  struct ibv_mr* mr = nullptr;
  EXPECT_EQ(wrap_ibv_reg_mr_iova2(nullptr, &fakePd, nullptr, 0, 0, 0), ncclInternalError);
  table.reg_mr_iova2 = fRegMrIova2;
  inject();
  EXPECT_EQ(wrap_ibv_reg_mr_iova2(nullptr, &fakePd, nullptr, 0, 0, 0), ncclSuccess);
  EXPECT_EQ(wrap_ibv_reg_mr_iova2(&mr, &fakePd, nullptr, 64, 0, 0), ncclSuccess);
  EXPECT_EQ(mr, &fakeMr);
  errno = 0;
  EXPECT_EQ(wrap_direct_ibv_reg_dmabuf_mr(&fakePd, 0, 0, 0, -1, 0), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

// ---- small ones
TEST_F(IbvWrapTest, DeviceListNullMeansNoDevices) {
  LogCapture log;
  struct ibv_device** list = (struct ibv_device**)1;
  int n = -1;
  EXPECT_EQ(wrap_ibv_get_device_list(&list, &n), ncclSuccess);
  EXPECT_EQ(list, nullptr);
  EXPECT_EQ(n, 0);
  EXPECT_TRUE(LogCapture::contains("Function not implemented")) << LogCapture::all();
}

TEST_F(IbvWrapTest, QueryPortOfAPlainContextUsesTheTable) {
  struct ibv_port_attr attr;
  memset(&attr, 0xff, sizeof(attr));
  EXPECT_EQ(wrap_ibv_query_port(&fakeCtx, 1, &attr), ncclSuccess);
  EXPECT_EQ(attr.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(attr.lid, 0);  // zeroed before the call
}

TEST_F(IbvWrapTest, WcStatusStrFallsBack) {
  EXPECT_STREQ(wrap_ibv_wc_status_str(IBV_WC_SUCCESS), "unknown completion status");
  table.wc_status_str = fWcStatusStr;
  inject();
  EXPECT_STREQ(wrap_ibv_wc_status_str(IBV_WC_SUCCESS), "fake status");
}

// ---- wrap_ibv_modify_qp: retries and hints
struct ModifyQpTest : IbvWrapTest {
  struct ibv_qp_attr attr;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PORT;
  void SetUp() override {
    IbvWrapTest::SetUp();
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.port_num = 1;
    attr.ah_attr.port_num = 1;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.sgid_index = 3;
    attr.ah_attr.grh.dgid.raw[0] = 0x20;
    attr.ah_attr.grh.dgid.raw[1] = 0x01;
    attr.ah_attr.grh.dgid.raw[2] = 0x0d;
    attr.ah_attr.grh.dgid.raw[3] = 0xb8;
    attr.ah_attr.grh.dgid.raw[15] = 0x02;
  }
  ncclResult_t modify() { return wrap_ibv_modify_qp(&fakeQpObj, &attr, mask); }
};

const char* kGidHint[] = {
    "HINT: In many cases this error occurs when the incorrect GID index is forced by NCCL_IB_GID_INDEX",
    "HINT: To confirm and fix the problem, set NCCL_IB_GID_INDEX=-1 (or unset it) to enable automatic detection",
    ("HINT: See https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-gid-index for more "
     "information"),
};
const char* kRailHint[] = {
    "HINT: In many cases this error occurs when NICs are not cross-rail connected (check the cabling)",
    "HINT: To confirm, set NCCL_CROSS_NIC=0 to disable cross-rail communication",
    ("HINT: See https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-cross-nic for more "
     "information"),
};

void expectExactLines(const char* const* lines, int n) {
  for (int i = 0; i < n; i++) {
    bool found = false;
    for (auto& l : LogCapture::lines()) found |= (l.msg == lines[i]);
    EXPECT_TRUE(found) << "missing line: " << lines[i] << "\nlog:\n" << LogCapture::all();
  }
}

TEST_F(ModifyQpTest, SuccessFirstTimeNeitherSleepsNorLogs) {
  LogCapture log;
  EXPECT_EQ(modify(), ncclSuccess);
  EXPECT_EQ(fake.modifyTimesNs.size(), 1u);
  EXPECT_EQ(LogCapture::lines().size(), 0u) << LogCapture::all();
}

TEST_F(ModifyQpTest, SucceedsAfterSomeTimeoutsWithGrowingSleeps) {
  env.set("NCCL_IB_MQP_RETRY_CNT", "5");
  env.set("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "2");
  LogCapture log;
  fake.modifyResults = {ETIMEDOUT, ETIMEDOUT, ETIMEDOUT};
  EXPECT_EQ(modify(), ncclSuccess);
  ASSERT_EQ(fake.modifyTimesNs.size(), 4u);
  for (int i = 1; i <= 3; i++) {
    uint64_t gap = fake.modifyTimesNs[i] - fake.modifyTimesNs[i - 1];
    EXPECT_GE(gap, (uint64_t)i * 2 * 1000000) << "sleep before attempt " << i + 1;
    std::string line = "retrying " + std::to_string(i) + "/6 after " + std::to_string(2 * i) + " msec of sleep";
    EXPECT_TRUE(LogCapture::contains(line, NCCL_LOG_INFO)) << line << "\n" << LogCapture::all();
  }
  EXPECT_TRUE(LogCapture::contains("Call to ibv_modify_qp failed with 110 Connection timed out, on dev fake0:1"));
  EXPECT_EQ(countLines("", NCCL_LOG_WARN), 0) << LogCapture::all();
}

TEST_F(ModifyQpTest, GivesUpAfterTheRetryCountWithTheRailHint) {
  env.set("NCCL_IB_MQP_RETRY_CNT", "3");
  env.set("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "1");
  LogCapture log;
  fake.modifyResults = std::vector<int>(10, ETIMEDOUT);
  EXPECT_EQ(modify(), ncclSystemError);
  EXPECT_EQ(fake.modifyTimesNs.size(), 4u);  // 1 + 3 retries
  EXPECT_EQ(countLines("retrying", NCCL_LOG_INFO), 3);
  EXPECT_TRUE(LogCapture::contains("retrying 3/4 after 3 msec of sleep"));
  EXPECT_TRUE(LogCapture::contains(
      "Call to ibv_modify_qp failed with 110 Connection timed out, on dev fake0:1, curr state INIT, next state RTR, "
      "local GID index 3, local GID fe80::3, remote GID 2001:db8::2",
      NCCL_LOG_WARN))
      << LogCapture::all();
  expectExactLines(kRailHint, 3);
  EXPECT_FALSE(LogCapture::contains("GID_INDEX"));
}

TEST_F(ModifyQpTest, NegativeTimeoutIsRetriedToo) {
  env.set("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "0");
  fake.modifyResults = {-ETIMEDOUT};
  EXPECT_EQ(modify(), ncclSuccess);
  EXPECT_EQ(fake.modifyTimesNs.size(), 2u);
}

TEST_F(ModifyQpTest, DefaultRetriesAre34) {
  env.set("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "0");
  LogCapture log;
  fake.modifyResults = std::vector<int>(100, ETIMEDOUT);
  EXPECT_EQ(modify(), ncclSystemError);
  EXPECT_EQ(fake.modifyTimesNs.size(), 35u);
}

TEST_F(ModifyQpTest, InvalidArgumentIsNotRetriedAndGivesTheGidHint) {
  env.set("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "1");
  LogCapture log;
  fake.modifyResults = {EINVAL};
  EXPECT_EQ(modify(), ncclSystemError);
  EXPECT_EQ(fake.modifyTimesNs.size(), 1u);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_modify_qp failed with 22 Invalid argument, on dev fake0:1",
                                   NCCL_LOG_WARN))
      << LogCapture::all();
  expectExactLines(kGidHint, 3);
  EXPECT_FALSE(LogCapture::contains("CROSS_NIC"));
}

TEST_F(ModifyQpTest, EmptyGidSlotOnSoftRoceGivesTheGidHintToo) {
  LogCapture log;
  fake.modifyResults = {ENODATA};
  EXPECT_EQ(modify(), ncclSystemError);
  EXPECT_EQ(fake.modifyTimesNs.size(), 1u);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_modify_qp failed with 61 No data available", NCCL_LOG_WARN));
  expectExactLines(kGidHint, 3);
}

TEST_F(ModifyQpTest, OtherErrorsHaveNoHint) {
  LogCapture log;
  fake.modifyResults = {EPERM};
  EXPECT_EQ(modify(), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_modify_qp failed with 1 Operation not permitted"));
  EXPECT_FALSE(LogCapture::contains("HINT")) << LogCapture::all();
}

TEST_F(ModifyQpTest, RetryAllRetriesAnyError) {
  env.set("NCCL_IB_MQP_RETRY_ALL", "1");
  env.set("NCCL_IB_MQP_RETRY_CNT", "4");
  env.set("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "1");
  LogCapture log;
  fake.modifyResults = {EINVAL, EIO};
  EXPECT_EQ(modify(), ncclSuccess);
  EXPECT_EQ(fake.modifyTimesNs.size(), 3u);
  fake = Fake();
  fake.modifyResults = std::vector<int>(10, EINVAL);
  EXPECT_EQ(modify(), ncclSystemError);
  EXPECT_EQ(fake.modifyTimesNs.size(), 5u);
  expectExactLines(kGidHint, 3);
}

TEST_F(ModifyQpTest, RetryCountZeroMeansOneAttempt) {
  env.set("NCCL_IB_MQP_RETRY_CNT", "0");
  LogCapture log;
  fake.modifyResults = {ETIMEDOUT};
  EXPECT_EQ(modify(), ncclSystemError);
  EXPECT_EQ(fake.modifyTimesNs.size(), 1u);
}

TEST_F(ModifyQpTest, DescribesWhatTheQpReportsWhenTheCallerDidNotSayIt) {
  LogCapture log;
  mask = IBV_QP_STATE;  // no port, no AV: taken from ibv_query_qp (port 1, not global)
  fake.modifyResults = {EPERM};
  EXPECT_EQ(modify(), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("on dev fake0:1, curr state INIT, next state RTR, local GID index -1, local GID "
                                   "N/A, remote GID N/A"))
      << LogCapture::all();
}

// ---- the memlock hint
struct MemlockTest : IbvWrapTest {
  struct rlimit saved;
  void SetUp() override {
    IbvWrapTest::SetUp();
    ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  }
  void TearDown() override {
    setrlimit(RLIMIT_MEMLOCK, &saved);
    IbvWrapTest::TearDown();
  }
  bool lowerTo(rlim_t bytes) {
    struct rlimit rl = saved;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < bytes) return false;
    rl.rlim_cur = bytes;
    return setrlimit(RLIMIT_MEMLOCK, &rl) == 0;
  }
  std::string hard() {
    return saved.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(saved.rlim_max / 1024) + " KiB";
  }
};

const char* kMemlockFix =
    "HINT: To fix it, add '* soft memlock unlimited' and '* hard memlock unlimited' to /etc/security/limits.conf, "
    "log in again or restart the job, and check with 'ulimit -l' (containers: --ulimit memlock=-1:-1)";

TEST_F(MemlockTest, RegMrOutOfMemoryNamesTheLimitAndTheFix) {
  ASSERT_TRUE(lowerTo(64 * 1024));
  LogCapture log;
  fake.fail = true;
  fake.errnoToSet = ENOMEM;
  struct ibv_mr* mr = nullptr;
  char buf[64];
  EXPECT_EQ(wrap_ibv_reg_mr(&mr, &fakePd, buf, sizeof(buf), 0), ncclSystemError);
  std::string first = "HINT: ibv_reg_mr failed with Cannot allocate memory: RDMA pins the memory it registers and "
                      "this process may lock only 64 KiB (RLIMIT_MEMLOCK soft limit; hard limit " +
                      hard() + ")";
  const char* lines[] = {"Call to ibv_reg_mr failed with error Cannot allocate memory", first.c_str(), kMemlockFix};
  expectExactLines(lines, 3);
  EXPECT_EQ(countLines("", NCCL_LOG_WARN), 3) << LogCapture::all();
}

TEST_F(MemlockTest, CreateQpAndCqWithEagainGetTheHint) {
  ASSERT_TRUE(lowerTo(128 * 1024));
  LogCapture log;
  fake.fail = true;
  fake.errnoToSet = EAGAIN;
  struct ibv_qp* qp;
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  EXPECT_EQ(wrap_ibv_create_qp(&qp, &fakePd, &init), ncclSystemError);
  struct ibv_cq* cq;
  EXPECT_EQ(wrap_ibv_create_cq(&cq, &fakeCtx, 16, nullptr, nullptr, 0), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("HINT: ibv_create_qp failed with Resource temporarily unavailable: RDMA pins the "
                                   "memory it registers and this process may lock only 128 KiB"))
      << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("HINT: ibv_create_cq failed with Resource temporarily unavailable"));
  EXPECT_EQ(countLines(kMemlockFix), 2);
}

TEST_F(MemlockTest, DmaBufRegistrationHasNoMemlockHint) {
  ASSERT_TRUE(lowerTo(64 * 1024));
  LogCapture log;
  table.reg_dmabuf_mr = [](struct ibv_pd*, uint64_t, size_t, uint64_t, int, int) -> struct ibv_mr* {
    errno = ENOMEM;
    return nullptr;
  };
  inject();
  struct ibv_mr* mr;
  EXPECT_EQ(wrap_ibv_reg_dmabuf_mr(&mr, &fakePd, 0, 4096, 0, 3, 0), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("Call to ibv_reg_dmabuf_mr failed with error Cannot allocate memory", NCCL_LOG_WARN));
  EXPECT_FALSE(LogCapture::contains("HINT")) << LogCapture::all();
}

TEST_F(MemlockTest, OtherErrorsHaveNoMemlockHint) {
  ASSERT_TRUE(lowerTo(64 * 1024));
  LogCapture log;
  fake.fail = true;
  fake.errnoToSet = EINVAL;
  struct ibv_mr* mr;
  EXPECT_EQ(wrap_ibv_reg_mr(&mr, &fakePd, nullptr, 0, 0), ncclSystemError);
  EXPECT_FALSE(LogCapture::contains("HINT")) << LogCapture::all();
}

TEST_F(MemlockTest, UnlimitedSaysMemlockIsNotTheCause) {
  struct rlimit unlimited = {RLIM_INFINITY, RLIM_INFINITY};  // raising the hard limit needs root
  if (setrlimit(RLIMIT_MEMLOCK, &unlimited) != 0) RAILNET_SKIP("cannot make RLIMIT_MEMLOCK unlimited here");
  LogCapture log;
  fake.fail = true;
  fake.errnoToSet = ENOMEM;
  struct ibv_mr* mr;
  EXPECT_EQ(wrap_ibv_reg_mr(&mr, &fakePd, nullptr, 0, 0), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("HINT: ibv_reg_mr failed with Cannot allocate memory while the locked-memory "
                                   "limit (RLIMIT_MEMLOCK) is unlimited"))
      << LogCapture::all();
  EXPECT_FALSE(LogCapture::contains("limits.conf"));
}

// ---- loading libibverbs
struct IbvLoadTest : IbvWrapTest {
  void SetUp() override {
    IbvWrapTest::SetUp();
    railnetIbvSetSymbols(nullptr);
  }
};

TEST_F(IbvLoadTest, NoLibibverbsMeansOneInfoAndIbUnavailable) {
  static const char* const names[] = {"libibverbs-railnet-absent.so", "libibverbs-railnet-absent.so.1", nullptr};
  railnetIbvSetLibNames(names);
  LogCapture log;
  EXPECT_EQ(wrap_ibv_symbols(), ncclSystemError);
  EXPECT_EQ(wrap_ibv_symbols(), ncclSystemError);  // remembered, not retried or logged again
  ASSERT_EQ(LogCapture::lines().size(), 1u) << LogCapture::all();
  auto& l = LogCapture::lines()[0];
  EXPECT_EQ(l.level, NCCL_LOG_INFO);
  EXPECT_NE(l.msg.find("libibverbs not found (tried libibverbs-railnet-absent.so, libibverbs-railnet-absent.so.1"),
            std::string::npos)
      << l.msg;
  EXPECT_NE(l.msg.find("Install rdma-core"), std::string::npos) << l.msg;
  // the wrappers refuse politely instead of crashing
  struct ibv_device** list;
  int n;
  EXPECT_EQ(wrap_ibv_get_device_list(&list, &n), ncclInternalError);
}

TEST_F(IbvLoadTest, LibraryWithoutTheVerbsIsRefused) {
  static const char* const names[] = {"libc.so.6", nullptr};
  railnetIbvSetLibNames(names);
  LogCapture log;
  struct railnetIbvSymbols t;
  EXPECT_EQ(railnetIbvLoadSymbols(&t), ncclSystemError);
  EXPECT_TRUE(LogCapture::contains("libc.so.6 has no ibv_get_device_list (version IBVERBS_1.1)", NCCL_LOG_WARN))
      << LogCapture::all();
  EXPECT_EQ(t.get_device_list, nullptr);
}

void* openRealVerbs() {
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  return h;
}

TEST_F(IbvLoadTest, RealLibibverbsResolvesTheVersionedSymbols) {
  void* h = openRealVerbs();
  if (!h) RAILNET_SKIP("libibverbs.so.1 is not installed");
  LogCapture log;
  struct railnetIbvSymbols t;
  ASSERT_EQ(railnetIbvLoadSymbols(&t), ncclSuccess) << LogCapture::all();
  // the IBVERBS_1.1 entry points, not the 1.0 compatibility ones
  EXPECT_EQ((void*)t.get_device_list, dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1"));
  EXPECT_NE((void*)t.get_device_list, dlvsym(h, "ibv_get_device_list", "IBVERBS_1.0"));
  EXPECT_EQ((void*)t.reg_mr, dlvsym(h, "ibv_reg_mr", "IBVERBS_1.1"));
  EXPECT_EQ((void*)t.modify_qp, dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1"));
  EXPECT_EQ((void*)t.create_comp_channel, dlvsym(h, "ibv_create_comp_channel", "IBVERBS_1.0"));
  void* const* p = (void* const*)&t;
  for (size_t i = 0; i < offsetof(struct railnetIbvSymbols, reg_mr_iova2) / sizeof(void*); i++)
    EXPECT_NE(p[i], nullptr) << "required verb #" << i;
  if (dlvsym(h, "ibv_reg_dmabuf_mr", "IBVERBS_1.12")) {
    EXPECT_NE((void*)t.reg_dmabuf_mr, nullptr);
    EXPECT_FALSE(LogCapture::contains("DMA-BUF off")) << LogCapture::all();
  }
  EXPECT_TRUE(LogCapture::contains("NET/IB : using libibverbs.so")) << LogCapture::all();
  dlclose(h);
}

TEST_F(IbvLoadTest, NcclIbverbsLibIsTriedFirst) {
  void* h = openRealVerbs();
  if (!h) RAILNET_SKIP("libibverbs.so.1 is not installed");
  dlclose(h);
  static const char* const names[] = {"libibverbs-railnet-absent.so", nullptr};
  railnetIbvSetLibNames(names);
  env.set("NCCL_IBVERBS_LIB", "libibverbs.so.1");
  LogCapture log;
  EXPECT_EQ(wrap_ibv_symbols(), ncclSuccess) << LogCapture::all();
  EXPECT_NE(railnetIbv.modify_qp, nullptr);
  EXPECT_TRUE(LogCapture::contains("NET/IB : using libibverbs.so.1"));
}

// A libibverbs with only the required verbs, built without symbol versions: the loader
// falls back to plain dlsym and turns the optional features off with one INFO.
TEST_F(IbvLoadTest, OptionalVerbsMissingTurnFeaturesOffWithOneInfo) {
  TempDir dir;
  std::string src = "#define V(n) void n(void) {}\n";
  for (const char* n : {"ibv_get_device_list", "ibv_free_device_list", "ibv_get_device_name", "ibv_open_device",
                        "ibv_close_device", "ibv_get_async_event", "ibv_ack_async_event", "ibv_query_device",
                        "ibv_query_port", "ibv_query_gid", "ibv_query_qp", "ibv_alloc_pd", "ibv_dealloc_pd",
                        "ibv_reg_mr", "ibv_dereg_mr", "ibv_create_comp_channel", "ibv_destroy_comp_channel",
                        "ibv_create_cq", "ibv_destroy_cq", "ibv_create_qp", "ibv_modify_qp", "ibv_destroy_qp",
                        "ibv_fork_init", "ibv_event_type_str", "ibv_wc_status_str"})
    src += std::string("V(") + n + ")\n";
  std::string c = dir.write("stub.c", src), so = dir.path() + "/libibverbs-stub.so";
  std::string cmd = "cc -shared -fPIC -o '" + so + "' '" + c + "' 2>/dev/null";
  if (system(cmd.c_str()) != 0) RAILNET_SKIP("no C compiler to build a stub libibverbs");
  const char* names[] = {so.c_str(), nullptr};
  railnetIbvSetLibNames(names);
  LogCapture log;
  struct railnetIbvSymbols t;
  ASSERT_EQ(railnetIbvLoadSymbols(&t), ncclSuccess) << LogCapture::all();
  EXPECT_NE(t.modify_qp, nullptr);
  EXPECT_EQ(t.reg_dmabuf_mr, nullptr);
  EXPECT_EQ(t.query_ece, nullptr);
  EXPECT_EQ(countLines("lacks"), 1) << LogCapture::all();
  EXPECT_TRUE(LogCapture::contains("lacks ibv_reg_mr_iova2, ibv_reg_dmabuf_mr, ibv_query_ece, ibv_set_ece, "
                                   "_ibv_query_gid_ex, _ibv_query_gid_table, ibv_query_port_speed (rdma-core too "
                                   "old): PCI relaxed ordering, DMA-BUF, ECE, GID types without sysfs, port speed "
                                   "beyond XDR off",
                                   NCCL_LOG_INFO))
      << LogCapture::all();
  EXPECT_EQ(countLines("", NCCL_LOG_WARN), 0);
}

}  // namespace
