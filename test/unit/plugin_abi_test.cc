// The plugin as NCCL sees it: the ABI layout of every interface version, and the
// exported ncclNetPlugin_v12 ... _v8 driven through init/devices/getProperties.
#include "test_util.h"
#include <dlfcn.h>
#include <stddef.h>
#include "plugin_loader.h"
#include "prof_recorder.h"
#include "net_pair.h"

extern "C" {
#include "railnet.h"
}

namespace {

// Offsets of NCCL's net plugin structs on LP64 (x86-64, aarch64), from NCCL's headers.
TEST(PluginAbi, PropertiesLayout) {
  EXPECT_EQ(sizeof(ncclNetProperties_v8_t), 64u);
  EXPECT_EQ(offsetof(ncclNetProperties_v8_t, guid), 16u);
  EXPECT_EQ(offsetof(ncclNetProperties_v8_t, speed), 32u);
  EXPECT_EQ(offsetof(ncclNetProperties_v8_t, latency), 40u);
  EXPECT_EQ(offsetof(ncclNetProperties_v8_t, netDeviceType), 52u);
  EXPECT_EQ(offsetof(ncclNetProperties_v8_t, netDeviceVersion), 56u);

  EXPECT_EQ(offsetof(ncclNetProperties_v9_t, forceFlush), 32u);
  EXPECT_EQ(offsetof(ncclNetProperties_v9_t, speed), 36u);
  EXPECT_EQ(offsetof(ncclNetProperties_v9_t, vProps), 64u);
  EXPECT_EQ(sizeof(ncclNetVDeviceProps_v9_t), 20u);
  EXPECT_EQ(offsetof(ncclNetProperties_v9_t, maxP2pBytes), 88u);
  EXPECT_EQ(offsetof(ncclNetProperties_v9_t, maxCollBytes), 96u);
  EXPECT_EQ(sizeof(ncclNetProperties_v9_t), 104u);
  EXPECT_EQ(sizeof(ncclNetProperties_v10_t), 104u);

  EXPECT_EQ(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize), 104u);
  EXPECT_EQ(sizeof(ncclNetProperties_v11_t), 112u);

  EXPECT_EQ(sizeof(ncclNetVDeviceProps_v12_t), 36u);
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, maxP2pBytes), 104u);
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize), 120u);
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, railId), 124u);
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, planeId), 126u);
  EXPECT_EQ(sizeof(ncclNetProperties_v12_t), 128u);

  EXPECT_EQ(sizeof(ncclNetDeviceHandle_v8_t), 32u);
  EXPECT_EQ(sizeof(ncclNetCommConfig_v10_t), 4u);
  EXPECT_EQ(sizeof(ncclNetAttr_v11_t), 44u);
  EXPECT_EQ(NCCL_NET_HANDLE_MAXSIZE, 128);
  EXPECT_EQ(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 7);
  EXPECT_EQ(ncclRemoteError, 6);
}

TEST(PluginAbi, FunctionTableLayout) {
  const size_t P = sizeof(void*);
  EXPECT_EQ(sizeof(ncclNet_v8_t), 19 * P);
  EXPECT_EQ(offsetof(ncclNet_v8_t, isend), 10 * P);
  EXPECT_EQ(offsetof(ncclNet_v8_t, irecvConsumed), 18 * P);
  EXPECT_EQ(sizeof(ncclNet_v9_t), 20 * P);
  EXPECT_EQ(offsetof(ncclNet_v9_t, makeVDevice), 19 * P);
  EXPECT_EQ(sizeof(ncclNet_v10_t), 20 * P);
  EXPECT_EQ(offsetof(ncclNet_v10_t, connect), 5 * P);
  EXPECT_EQ(sizeof(ncclNet_v11_t), 22 * P);
  EXPECT_EQ(offsetof(ncclNet_v11_t, finalize), 20 * P);
  EXPECT_EQ(offsetof(ncclNet_v11_t, setNetAttr), 21 * P);
  EXPECT_EQ(sizeof(ncclNet_v12_t), 22 * P);
}

TEST(PluginLoader, NamingRule) {
  EXPECT_EQ(ncclPluginLibName("railnet"), "libnccl-net-railnet.so");
  EXPECT_EQ(ncclPluginLibName(""), "libnccl-net.so");
}

struct Plugin : ::testing::Test {
  void* lib = nullptr;
  void SetUp() override {
    std::string err;
    lib = loadPluginFromBuild("railnet", &err);
    ASSERT_NE(lib, nullptr) << err;
  }
  void TearDown() override {
    if (lib) dlclose(lib);
  }
  template <typename T>
  T* sym(const char* name) {
    return reinterpret_cast<T*>(dlsym(lib, name));
  }
};

TEST_F(Plugin, ExportsEveryVersionAndNothingElse) {
  for (const char* s : {"ncclNetPlugin_v8", "ncclNetPlugin_v9", "ncclNetPlugin_v10", "ncclNetPlugin_v11",
                        "ncclNetPlugin_v12", "ncclRmaPlugin_v13", "ncclRmaPlugin_v14"})
    EXPECT_NE(dlsym(lib, s), nullptr) << s;
  EXPECT_EQ(dlsym(lib, "ncclNetPlugin_v7"), nullptr);
  EXPECT_EQ(dlsym(lib, "railnetDebugLog"), nullptr);
}

// Drives every version the way NCCL does and checks what railnet's registry predicts:
// with no transport usable, init fails with a WARN that says so; otherwise devices and
// properties come back consistent across versions.
TEST_F(Plugin, InitDevicesPropertiesThroughEveryVersion) {
  ScopedEnv env;
  env.set("RAILNET_TRANSPORT", "socket");
  LogCapture log;
  bool haveSocket = railnetGetNet("socket") != nullptr;

  auto* v12 = sym<ncclNet_v12_t>("ncclNetPlugin_v12");
  auto* v11 = sym<ncclNet_v11_t>("ncclNetPlugin_v11");
  auto* v10 = sym<ncclNet_v10_t>("ncclNetPlugin_v10");
  auto* v9 = sym<ncclNet_v9_t>("ncclNetPlugin_v9");
  auto* v8 = sym<ncclNet_v8_t>("ncclNetPlugin_v8");
  ASSERT_TRUE(v12 && v11 && v10 && v9 && v8);

  void* ctx = nullptr;
  ncclResult_t r12 = v12->init(&ctx, 0, nullptr, LogCapture::logger, nullptr);
  if (!haveSocket) {
    EXPECT_EQ(r12, ncclInternalError);
    EXPECT_TRUE(LogCapture::contains("no transport available", NCCL_LOG_WARN)) << LogCapture::all();
    EXPECT_EQ(v11->init(&ctx, 0, nullptr, LogCapture::logger, nullptr), ncclInternalError);
    EXPECT_EQ(v10->init(LogCapture::logger, nullptr), ncclInternalError);
    EXPECT_EQ(v9->init(LogCapture::logger), ncclInternalError);
    EXPECT_EQ(v8->init(LogCapture::logger), ncclInternalError);
    int ndev = -1;
    EXPECT_EQ(v12->devices(&ndev), ncclInvalidUsage);  // calls before a good init are refused
    return;
  }
  ASSERT_EQ(r12, ncclSuccess) << LogCapture::all();
  EXPECT_STREQ(v12->name, "RailSocket");
  int n12 = 0, n8 = 0;
  ASSERT_EQ(v12->devices(&n12), ncclSuccess);
  ASSERT_GT(n12, 0);
  ASSERT_EQ(v8->init(LogCapture::logger), ncclSuccess);
  ASSERT_EQ(v10->init(LogCapture::logger, nullptr), ncclSuccess);
  ASSERT_EQ(v8->devices(&n8), ncclSuccess);
  EXPECT_EQ(n8, n12);
  for (int d = 0; d < n12; d++) {
    ncclNetProperties_v12_t p12;
    ncclNetProperties_v11_t p11;
    ncclNetProperties_v9_t p9;
    ncclNetProperties_v8_t p8;
    ASSERT_EQ(v12->getProperties(d, &p12), ncclSuccess);
    ASSERT_EQ(v11->getProperties(d, &p11), ncclSuccess);
    ASSERT_EQ(v9->getProperties(d, &p9), ncclSuccess);
    ASSERT_EQ(v8->getProperties(d, &p8), ncclSuccess);
    EXPECT_STREQ(p12.name, p8.name);
    EXPECT_EQ(p12.speed, p8.speed);
    EXPECT_EQ(p12.speed, p9.speed);
    EXPECT_EQ(p12.maxComms, p11.maxComms);
    EXPECT_EQ(p12.maxRecvs, p9.maxRecvs);
    EXPECT_EQ(p12.ptrSupport, p8.ptrSupport);
    EXPECT_EQ(p12.maxP2pBytes, p9.maxP2pBytes);
    EXPECT_EQ(p12.guid, p11.guid);
  }
  EXPECT_EQ(v12->finalize(ctx), ncclSuccess);
}

TEST_F(Plugin, InvalidTransportChoiceIsRefused) {
  ScopedEnv env;
  env.set("RAILNET_TRANSPORT", "carrier-pigeon");
  LogCapture log;
  auto* v12 = sym<ncclNet_v12_t>("ncclNetPlugin_v12");
  void* ctx = nullptr;
  EXPECT_EQ(v12->init(&ctx, 0, nullptr, LogCapture::logger, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(LogCapture::contains("RAILNET_TRANSPORT=carrier-pigeon", NCCL_LOG_WARN)) << LogCapture::all();
}

// The profiler callback NCCL hands to the exported init (v10's and v12's) reaches the
// transport: a message through the plugin's own function tables gets its socket events under
// the phandles passed, with NCCL's Socket plugin id, lengths adding up to the message.
TEST_F(Plugin, ProfilerCallbackGivenToTheExportedInitReachesTheTransport) {
  ScopedEnv env;
  env.set("RAILNET_TRANSPORT", "socket");
  env.set("NCCL_SOCKET_IFNAME", "lo");
  auto* v10 = sym<ncclNet_v10_t>("ncclNetPlugin_v10");
  auto* v12 = sym<ncclNet_v12_t>("ncclNetPlugin_v12");
  ASSERT_TRUE(v10 && v12);
  for (int version : {10, 12}) {
    ProfRecorder::clear();
    void* ctx = nullptr;
    if (version == 10) {
      ASSERT_EQ(v10->init(LogCapture::logger, ProfRecorder::callback), ncclSuccess);
    } else {
      ASSERT_EQ(v12->init(&ctx, 0, nullptr, LogCapture::logger, ProfRecorder::callback), ncclSuccess);
    }
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = nullptr, *sc = nullptr, *rc = nullptr;
    if (version == 10) {
      ASSERT_EQ(v10->listen(0, handle, &lc), ncclSuccess);
    } else {
      ASSERT_EQ(v12->listen(ctx, 0, handle, &lc), ncclSuccess);
    }
    long long dl = netNowNs() + 20000000000LL;
    while ((sc == nullptr || rc == nullptr) && netNowNs() < dl) {
      if (sc == nullptr) {
        if (version == 10) {
          ASSERT_EQ(v10->connect(0, nullptr, handle, &sc, nullptr), ncclSuccess);
        } else {
          ASSERT_EQ(v12->connect(ctx, 0, handle, &sc, nullptr), ncclSuccess);
        }
      }
      if (rc == nullptr) {
        if (version == 10) {
          ASSERT_EQ(v10->accept(lc, &rc, nullptr), ncclSuccess);
        } else {
          ASSERT_EQ(v12->accept(lc, &rc, nullptr), ncclSuccess);
        }
      }
    }
    // the data calls through the same version's table
    auto isend = version == 10 ? v10->isend : v12->isend;
    auto irecv = version == 10 ? v10->irecv : v12->irecv;
    auto test = version == 10 ? v10->test : v12->test;
    ASSERT_TRUE(sc && rc) << "version " << version;
    const size_t size = 200000;
    std::vector<char> out(size, 'p'), in(size, 0);
    char phs[2];
    void *sreq = nullptr, *rreq = nullptr, *rdata = in.data(), *mh = nullptr, *rph = &phs[1];
    size_t rsize = size;
    int tag = 3;
    while (rreq == nullptr && netNowNs() < dl) {
      ASSERT_EQ(irecv(rc, 1, &rdata, &rsize, &tag, &mh, &rph, &rreq), ncclSuccess);
    }
    while (sreq == nullptr && netNowNs() < dl) {
      ASSERT_EQ(isend(sc, out.data(), size, tag, nullptr, &phs[0], &sreq), ncclSuccess);
    }
    int sdone = 0, rdone = 0;
    while ((!sdone || !rdone) && netNowNs() < dl) {
      if (!sdone) {
        ASSERT_EQ(test(sreq, &sdone, nullptr), ncclSuccess);
      }
      if (!rdone) {
        ASSERT_EQ(test(rreq, &rdone, nullptr), ncclSuccess);
      }
    }
    ASSERT_TRUE(sdone && rdone) << "version " << version;
    EXPECT_EQ(in, out);
    for (int side = 0; side < 2; side++) {
      std::vector<ProfEvent> ev = ProfRecorder::under(&phs[side]);
      ASSERT_FALSE(ev.empty()) << "version " << version << ": no event under the " << (side ? "irecv" : "isend")
                               << "'s phandle";
      size_t sum = 0;
      for (auto& e : ev) {
        EXPECT_EQ(e.pluginId, (int64_t)(NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER));
        EXPECT_EQ(e.stops, 1);
        sum += e.sd.sock.length;
      }
      EXPECT_EQ(sum, size) << "version " << version;
    }
    if (version == 10) {
      v10->closeSend(sc);
      v10->closeRecv(rc);
      v10->closeListen(lc);
    } else {
      v12->closeSend(sc);
      v12->closeRecv(rc);
      v12->closeListen(lc);
      v12->finalize(ctx);
    }
  }
  EXPECT_EQ(ProfRecorder::badCalls(), 0);
}

}  // namespace
