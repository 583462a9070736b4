/*
 * The symbols NCCL looks up in libnccl-net-railnet.so: ncclNetPlugin_v12 ... _v8.
 * Each is an adapter over one implementation of the newest interface (v12); the
 * transport behind it is chosen at the first init by RAILNET_TRANSPORT=auto|ib|socket.
 */
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "core.h"
#include "param.h"
#include "railnet.h"
#include "transport.h"

/* RAILNET_TRANSPORT takes auto, ib or socket (any case; empty is auto); anything else fails init. */
static railnetParamVerdict transportCheck(const char* want, int64_t value, char* note, size_t size) {
  (void)value;
  if (want == NULL || want[0] == '\0' || strcasecmp(want, "auto") == 0 || strcasecmp(want, "ib") == 0 ||
      strcasecmp(want, "socket") == 0)
    return RAILNET_PARAM_TAKEN;
  snprintf(note, size, "invalid RAILNET_TRANSPORT=%s: the plugin's init fails (NCCL then runs without it, on its "
           "internal network); use auto, ib or socket", want);
  return RAILNET_PARAM_REFUSED;
}

static const railnetParam pluginParams[] = {
    RAILNET_PARAM_STR_CHECKED("RAILNET_TRANSPORT", "auto", transportCheck,
                              "Transport of the plugin: auto (IB when an active port exists, else Socket), ib or socket"),
};
RAILNET_PARAM_TABLE("plugin", pluginParams);

/* ABI pins: NCCL reads these structs by offset (see test/unit/plugin_abi_test.cc too). */
_Static_assert(sizeof(ncclNetProperties_v8_t) == 64, "v8 properties size");
_Static_assert(offsetof(ncclNetProperties_v9_t, vProps) == 64, "v9 vProps offset");
_Static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "v9 maxP2pBytes offset");
_Static_assert(sizeof(ncclNetProperties_v9_t) == 104, "v9 properties size");
_Static_assert(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104, "v11 maxMultiRequestSize offset");
_Static_assert(sizeof(ncclNetProperties_v11_t) == 112, "v11 properties size");
_Static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104, "v12 maxP2pBytes offset");
_Static_assert(offsetof(ncclNetProperties_v12_t, railId) == 124, "v12 railId offset");
_Static_assert(sizeof(ncclNetProperties_v12_t) == 128, "v12 properties size");
_Static_assert(sizeof(ncclNet_v8_t) == 19 * sizeof(void*), "v8 table size");
_Static_assert(sizeof(ncclNet_v9_t) == 20 * sizeof(void*), "v9 table size");
_Static_assert(sizeof(ncclNet_v10_t) == 20 * sizeof(void*), "v10 table size");
_Static_assert(sizeof(ncclNet_v11_t) == 22 * sizeof(void*), "v11 table size");
_Static_assert(sizeof(ncclNet_v12_t) == 22 * sizeof(void*), "v12 table size");

static pthread_mutex_t pluginLock = PTHREAD_MUTEX_INITIALIZER;
static const ncclNet_t* impl;     /* chosen transport, NULL until init succeeds */
static void* legacyCtx;           /* the one context of the v8..v10 interfaces */

/* v10 passes a config with each connect; one context per traffic class serves it. */
#define MAX_TC_CTX 16
static struct { int tc; void* ctx; } tcCtx[MAX_TC_CTX];
static int tcCtxCount;

extern ncclNet_v8_t ncclNetPlugin_v8;
extern ncclNet_v9_t ncclNetPlugin_v9;
extern ncclNet_v10_t ncclNetPlugin_v10;
extern ncclNet_v11_t ncclNetPlugin_v11;
extern ncclNet_v12_t ncclNetPlugin_v12;

static void publishName(const char* name) {
  ncclNetPlugin_v8.name = name;
  ncclNetPlugin_v9.name = name;
  ncclNetPlugin_v10.name = name;
  ncclNetPlugin_v11.name = name;
  ncclNetPlugin_v12.name = name;
}

/* Optional calls the chosen transport lacks are published as NULL, as NCCL expects. */
static void publishOptional(void) {
  if (impl->regMrDmaBuf == NULL) {
    ncclNetPlugin_v8.regMrDmaBuf = NULL;
    ncclNetPlugin_v9.regMrDmaBuf = NULL;
    ncclNetPlugin_v10.regMrDmaBuf = NULL;
    ncclNetPlugin_v11.regMrDmaBuf = NULL;
    ncclNetPlugin_v12.regMrDmaBuf = NULL;
  }
  if (impl->makeVDevice == NULL) {
    ncclNetPlugin_v9.makeVDevice = NULL;
    ncclNetPlugin_v10.makeVDevice = NULL;
    ncclNetPlugin_v11.makeVDevice = NULL;
    ncclNetPlugin_v12.makeVDevice = NULL;
  }
}

/* Try one transport: its init must succeed and it must have at least one device. */
static ncclResult_t tryTransport(const ncclNet_t* net, ncclDebugLogger_t logger, void** ctx,
                                 ncclProfilerCallback_t prof) {
  int ndev = 0;
  ncclResult_t res = net->init(ctx, 0, NULL, logger, prof);
  if (res != ncclSuccess) return res;
  res = net->devices(&ndev);
  if (res == ncclSuccess && ndev <= 0) res = ncclSystemError;
  if (res != ncclSuccess && net->finalize) net->finalize(*ctx);
  return res;
}

/*
 * Choose the transport once per process. `ctx` receives a context of the chosen
 * transport created with no comm config (the v8..v10 context, or the first v11+ one).
 */
static ncclResult_t pluginSelect(ncclDebugLogger_t logger, ncclProfilerCallback_t prof, void** ctx) {
  railnetSetLogger(logger);
  const char* want = railnetParamStr(&pluginParams[0]);
  if (want == NULL || want[0] == '\0') want = "auto";
  int isAuto = strcasecmp(want, "auto") == 0;
  char note[256];
  if (railnetParamJudge(&pluginParams[0], note, sizeof(note)) == RAILNET_PARAM_REFUSED) {
    WARN("NET/Plugin: railnet: %s", note);
    return ncclInvalidArgument;
  }
  char tried[256] = "";
  unsigned long warns = railnetDebugWarnCount();
  for (const railnetTransportEntry* t = railnetTransports; t->key != NULL; t++) {
    if (!isAuto && strcasecmp(want, t->key) != 0) continue;
    ncclResult_t res = tryTransport(t->net, logger, ctx, prof);
    if (res == ncclSuccess) {
      impl = t->net;
      publishName(impl->name);
      publishOptional();
      INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: railnet %s using %s (RAILNET_TRANSPORT=%s)", railnetVersion(),
           impl->name, want);
      return ncclSuccess;
    }
    size_t len = strlen(tried);
    snprintf(tried + len, sizeof(tried) - len, "%s%s", len ? ", " : "", t->net->name);
    if (!isAuto) break;
  }
  if (tried[0] == '\0') {
    WARN("NET/Plugin: railnet %s has no transport available for RAILNET_TRANSPORT=%s "
         "(this build carries none that matches); NCCL will fall back to its internal network",
         railnetVersion(), want);
  } else {
    WARN("NET/Plugin: railnet found no usable transport (tried %s; %s); check NCCL_SOCKET_IFNAME / NCCL_IB_HCA, or "
         "set RAILNET_TRANSPORT", tried,
         railnetDebugWarnCount() != warns ? "the WARN above says why"
                                          : "why is in the INFO lines: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET");
  }
  return ncclInternalError;
}

/* ------------------------------------------------------------------ helpers */

static void propsToV11(const ncclNetProperties_v12_t* p, ncclNetProperties_v11_t* o) {
  memset(o, 0, sizeof(*o));
  o->name = p->name;
  o->pciPath = p->pciPath;
  o->guid = p->guid;
  o->ptrSupport = p->ptrSupport;
  o->regIsGlobal = p->regIsGlobal;
  o->forceFlush = p->forceFlush;
  o->speed = p->speed;
  o->port = p->port;
  o->latency = p->latency;
  o->maxComms = p->maxComms;
  o->maxRecvs = p->maxRecvs;
  o->netDeviceType = p->netDeviceType;
  o->netDeviceVersion = p->netDeviceVersion;
  o->vProps.ndevs = p->vProps.ndevs > NCCL_NET_MAX_DEVS_PER_NIC_V11 ? NCCL_NET_MAX_DEVS_PER_NIC_V11 : p->vProps.ndevs;
  for (int i = 0; i < o->vProps.ndevs; i++) o->vProps.devs[i] = p->vProps.devs[i];
  o->maxP2pBytes = p->maxP2pBytes;
  o->maxCollBytes = p->maxCollBytes;
  o->maxMultiRequestSize = p->maxMultiRequestSize;
}

static void propsToV9(const ncclNetProperties_v12_t* p, ncclNetProperties_v9_t* o) {
  ncclNetProperties_v11_t v11;
  propsToV11(p, &v11);
  memset(o, 0, sizeof(*o));
  o->name = v11.name;
  o->pciPath = v11.pciPath;
  o->guid = v11.guid;
  o->ptrSupport = v11.ptrSupport;
  o->regIsGlobal = v11.regIsGlobal;
  o->forceFlush = v11.forceFlush;
  o->speed = v11.speed;
  o->port = v11.port;
  o->latency = v11.latency;
  o->maxComms = v11.maxComms;
  o->maxRecvs = v11.maxRecvs;
  o->netDeviceType = v11.netDeviceType;
  o->netDeviceVersion = v11.netDeviceVersion;
  o->vProps.ndevs = v11.vProps.ndevs;
  memcpy(o->vProps.devs, v11.vProps.devs, sizeof(o->vProps.devs));
  o->maxP2pBytes = v11.maxP2pBytes;
  o->maxCollBytes = v11.maxCollBytes;
}

static ncclResult_t needImpl(const char* call) {
  if (impl != NULL) return ncclSuccess;
  WARN("NET/Plugin: railnet: %s called before a successful init", call);
  return ncclInvalidUsage;
}

/* Props of the chosen transport, for the older layouts. */
static ncclResult_t props12(int dev, ncclNetProperties_v12_t* p) {
  NCCLCHECK(needImpl("getProperties"));
  memset(p, 0, sizeof(*p));
  return impl->getProperties(dev, p);
}

static ncclResult_t vprops12(int ndevs, const int* devs, int max, ncclNetVDeviceProps_v12_t* o) {
  if (ndevs < 0 || ndevs > max) {
    WARN("NET/Plugin: makeVDevice with %d devices; this interface version allows 1..%d", ndevs, max);
    return ncclInvalidArgument;
  }
  memset(o, 0, sizeof(*o));
  o->ndevs = ndevs;
  for (int i = 0; i < ndevs; i++) o->devs[i] = devs[i];
  return ncclSuccess;
}

/* ------------------------------------------------------------- v11 and v12 */

static ncclResult_t v12Init(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config,
                            ncclDebugLogger_t logger, ncclProfilerCallback_t prof) {
  pthread_mutex_lock(&pluginLock);
  ncclResult_t res = ncclSuccess;
  void* firstCtx = NULL;
  int fresh = 0;
  if (impl == NULL) {
    res = pluginSelect(logger, prof, &firstCtx);
    fresh = res == ncclSuccess;
  }
  pthread_mutex_unlock(&pluginLock);
  if (res != ncclSuccess) return res;
  if (fresh && commId == 0 && config == NULL) {
    *ctx = firstCtx;
    return ncclSuccess;
  }
  if (fresh && impl->finalize) impl->finalize(firstCtx);
  return impl->init(ctx, commId, config, logger, prof);
}
static ncclResult_t v12Devices(int* ndev) { NCCLCHECK(needImpl("devices")); return impl->devices(ndev); }
static ncclResult_t v12GetProperties(int dev, ncclNetProperties_v12_t* p) { return props12(dev, p); }
static ncclResult_t v12Listen(void* ctx, int dev, void* handle, void** listenComm) {
  NCCLCHECK(needImpl("listen"));
  return impl->listen(ctx, dev, handle, listenComm);
}
static ncclResult_t v12Connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v12_t** dc) {
  NCCLCHECK(needImpl("connect"));
  return impl->connect(ctx, dev, handle, sendComm, dc);
}
static ncclResult_t v12Accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** dc) {
  NCCLCHECK(needImpl("accept"));
  return impl->accept(listenComm, recvComm, dc);
}
static ncclResult_t v12RegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  NCCLCHECK(needImpl("regMr"));
  return impl->regMr(comm, data, size, type, mhandle);
}
static ncclResult_t v12RegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                   void** mhandle) {
  NCCLCHECK(needImpl("regMrDmaBuf"));
  if (impl->regMrDmaBuf == NULL) {
    WARN("NET/Plugin: %s does not support DMA-BUF registration", impl->name);
    return ncclInvalidUsage;
  }
  return impl->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
}
static ncclResult_t v12DeregMr(void* comm, void* mhandle) { NCCLCHECK(needImpl("deregMr")); return impl->deregMr(comm, mhandle); }
static ncclResult_t v12Isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                             void** request) {
  NCCLCHECK(needImpl("isend"));
  return impl->isend(sendComm, data, size, tag, mhandle, phandle, request);
}
static ncclResult_t v12Irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                             void** phandles, void** request) {
  NCCLCHECK(needImpl("irecv"));
  return impl->irecv(recvComm, n, data, sizes, tags, mhandles, phandles, request);
}
static ncclResult_t v12Iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  NCCLCHECK(needImpl("iflush"));
  return impl->iflush(recvComm, n, data, sizes, mhandles, request);
}
static ncclResult_t v12Test(void* request, int* done, int* sizes) { NCCLCHECK(needImpl("test")); return impl->test(request, done, sizes); }
static ncclResult_t v12CloseSend(void* c) { NCCLCHECK(needImpl("closeSend")); return impl->closeSend(c); }
static ncclResult_t v12CloseRecv(void* c) { NCCLCHECK(needImpl("closeRecv")); return impl->closeRecv(c); }
static ncclResult_t v12CloseListen(void* c) { NCCLCHECK(needImpl("closeListen")); return impl->closeListen(c); }
static ncclResult_t v12MakeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) {
  NCCLCHECK(needImpl("makeVDevice"));
  if (impl->makeVDevice == NULL) {
    WARN("NET/Plugin: %s cannot fuse devices (makeVDevice is not supported by this transport)", impl->name);
    return ncclInvalidUsage;
  }
  return impl->makeVDevice(d, props);
}
static ncclResult_t v12Finalize(void* ctx) {
  NCCLCHECK(needImpl("finalize"));
  return impl->finalize ? impl->finalize(ctx) : ncclSuccess;
}
static ncclResult_t v12SetNetAttr(void* ctx, ncclNetAttr_v12_t* attr) {
  NCCLCHECK(needImpl("setNetAttr"));
  return impl->setNetAttr ? impl->setNetAttr(ctx, attr) : ncclSuccess;
}

static ncclResult_t v11GetProperties(int dev, ncclNetProperties_v11_t* o) {
  ncclNetProperties_v12_t p;
  NCCLCHECK(props12(dev, &p));
  propsToV11(&p, o);
  return ncclSuccess;
}
static ncclResult_t v11MakeVDevice(int* d, ncclNetVDeviceProps_v11_t* props) {
  ncclNetVDeviceProps_v12_t p;
  if (props == NULL) return ncclInvalidArgument;
  NCCLCHECK(vprops12(props->ndevs, props->devs, NCCL_NET_MAX_DEVS_PER_NIC_V11, &p));
  return v12MakeVDevice(d, &p);
}

/* -------------------------------------------------------------- v8 ... v10 */

static ncclResult_t legacyInit(ncclDebugLogger_t logger, ncclProfilerCallback_t prof) {
  pthread_mutex_lock(&pluginLock);
  ncclResult_t res = ncclSuccess;
  if (impl == NULL) res = pluginSelect(logger, prof, &legacyCtx);
  else if (legacyCtx == NULL) res = impl->init(&legacyCtx, 0, NULL, logger, prof);
  pthread_mutex_unlock(&pluginLock);
  return res;
}
static ncclResult_t v8Init(ncclDebugLogger_t logger) { return legacyInit(logger, NULL); }
static ncclResult_t v10Init(ncclDebugLogger_t logger, ncclProfilerCallback_t prof) { return legacyInit(logger, prof); }

static ncclResult_t v8GetProperties(int dev, ncclNetProperties_v8_t* o) {
  ncclNetProperties_v12_t p;
  NCCLCHECK(props12(dev, &p));
  memset(o, 0, sizeof(*o));
  o->name = p.name;
  o->pciPath = p.pciPath;
  o->guid = p.guid;
  o->ptrSupport = p.ptrSupport;
  o->regIsGlobal = p.regIsGlobal;
  o->speed = p.speed;
  o->port = p.port;
  o->latency = p.latency;
  o->maxComms = p.maxComms;
  o->maxRecvs = p.maxRecvs;
  o->netDeviceType = p.netDeviceType;
  o->netDeviceVersion = p.netDeviceVersion;
  return ncclSuccess;
}
static ncclResult_t v9GetProperties(int dev, ncclNetProperties_v9_t* o) {
  ncclNetProperties_v12_t p;
  NCCLCHECK(props12(dev, &p));
  propsToV9(&p, o);
  return ncclSuccess;
}
static ncclResult_t legacyListen(int dev, void* handle, void** listenComm) { return v12Listen(legacyCtx, dev, handle, listenComm); }
static ncclResult_t legacyConnect(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** dc) {
  return v12Connect(legacyCtx, dev, handle, sendComm, dc);
}

/* The context that carries a v10 connect's traffic class. */
static ncclResult_t ctxForConfig(ncclNetCommConfig_v10_t* config, void** ctx) {
  if (config == NULL || config->trafficClass == NCCL_NET_TRAFFIC_CLASS_UNDEF) {
    *ctx = legacyCtx;
    return ncclSuccess;
  }
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&pluginLock);
  *ctx = NULL;
  for (int i = 0; i < tcCtxCount; i++)
    if (tcCtx[i].tc == config->trafficClass) *ctx = tcCtx[i].ctx;
  if (*ctx == NULL) {
    if (tcCtxCount == MAX_TC_CTX) {
      WARN("NET/Plugin: more than %d traffic classes in use; using the default context", MAX_TC_CTX);
      *ctx = legacyCtx;
    } else {
      res = impl->init(ctx, 0, config, railnetGetLogger(), NULL);
      if (res == ncclSuccess) {
        tcCtx[tcCtxCount].tc = config->trafficClass;
        tcCtx[tcCtxCount].ctx = *ctx;
        tcCtxCount++;
      }
    }
  }
  pthread_mutex_unlock(&pluginLock);
  return res;
}
static ncclResult_t v10Connect(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                               ncclNetDeviceHandle_v10_t** dc) {
  void* ctx;
  NCCLCHECK(needImpl("connect"));
  NCCLCHECK(ctxForConfig(config, &ctx));
  return v12Connect(ctx, dev, handle, sendComm, dc);
}

static ncclResult_t v8Isend(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) {
    WARN("NET/Plugin: isend with negative size %d", size);
    return ncclInvalidArgument;
  }
  return v12Isend(sendComm, data, (size_t)size, tag, mhandle, NULL, request);
}
static ncclResult_t v9Isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return v12Isend(sendComm, data, size, tag, mhandle, NULL, request);
}

/* Grouped receives never exceed maxRecvs; this bounds the conversion buffers. */
#define MAX_GROUPED_RECVS 8
static ncclResult_t v8Irecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                            void** request) {
  size_t s[MAX_GROUPED_RECVS];
  if (n < 1 || n > MAX_GROUPED_RECVS || sizes == NULL) {
    WARN("NET/Plugin: irecv with n=%d receives; 1..%d are allowed", n, MAX_GROUPED_RECVS);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0) {
      WARN("NET/Plugin: irecv with negative size %d", sizes[i]);
      return ncclInvalidArgument;
    }
    s[i] = (size_t)sizes[i];
  }
  return v12Irecv(recvComm, n, data, s, tags, mhandles, NULL, request);
}
static ncclResult_t v9Irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** request) {
  return v12Irecv(recvComm, n, data, sizes, tags, mhandles, NULL, request);
}
static ncclResult_t v9MakeVDevice(int* d, ncclNetVDeviceProps_v9_t* props) {
  ncclNetVDeviceProps_v12_t p;
  if (props == NULL) return ncclInvalidArgument;
  NCCLCHECK(vprops12(props->ndevs, props->devs, NCCL_NET_MAX_DEVS_PER_NIC_V9, &p));
  return v12MakeVDevice(d, &p);
}

/* --------------------------------------------------------- exported tables */

#define RAILNET_EXPORT __attribute__((visibility("default")))

RAILNET_EXPORT ncclNet_v12_t ncclNetPlugin_v12 = {
    "RailSocket", v12Init, v12Devices, v12GetProperties, v12Listen, v12Connect, v12Accept, v12RegMr,
    v12RegMrDmaBuf, v12DeregMr, v12Isend, v12Irecv, v12Iflush, v12Test, v12CloseSend, v12CloseRecv,
    v12CloseListen, NULL, NULL, v12MakeVDevice, v12Finalize, v12SetNetAttr};

RAILNET_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {
    "RailSocket", v12Init, v12Devices, v11GetProperties, v12Listen, v12Connect, v12Accept, v12RegMr,
    v12RegMrDmaBuf, v12DeregMr, v12Isend, v12Irecv, v12Iflush, v12Test, v12CloseSend, v12CloseRecv,
    v12CloseListen, NULL, NULL, v11MakeVDevice, v12Finalize, v12SetNetAttr};

RAILNET_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = {
    "RailSocket", v10Init, v12Devices, v9GetProperties, legacyListen, v10Connect, v12Accept, v12RegMr,
    v12RegMrDmaBuf, v12DeregMr, v12Isend, v12Irecv, v12Iflush, v12Test, v12CloseSend, v12CloseRecv,
    v12CloseListen, NULL, NULL, v9MakeVDevice};

RAILNET_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = {
    "RailSocket", v8Init, v12Devices, v9GetProperties, legacyListen, legacyConnect, v12Accept, v12RegMr,
    v12RegMrDmaBuf, v12DeregMr, v9Isend, v9Irecv, v12Iflush, v12Test, v12CloseSend, v12CloseRecv,
    v12CloseListen, NULL, NULL, v9MakeVDevice};

RAILNET_EXPORT ncclNet_v8_t ncclNetPlugin_v8 = {
    "RailSocket", v8Init, v12Devices, v8GetProperties, legacyListen, legacyConnect, v12Accept, v12RegMr,
    v12RegMrDmaBuf, v12DeregMr, v8Isend, v8Irecv, v12Iflush, v12Test, v12CloseSend, v12CloseRecv,
    v12CloseListen, NULL, NULL};

/* Before init, the name reflects what RAILNET_TRANSPORT asks for. */
__attribute__((constructor)) static void pluginLoadName(void) {
  /* raw (env.h): at load time nothing may be logged yet */
  const char* want = railnetEnvGet(pluginParams[0].name, NULL);
  if (want != NULL && strcasecmp(want, "ib") == 0) publishName("RailIB");
}
