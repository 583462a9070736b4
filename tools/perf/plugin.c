/* The net plugin, loaded by dlopen as NCCL loads it, through any ABI v8..v12: one set of
 * calls over every version's struct, and the checks of the device in use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "perf.h"
#include "param.h"
#include "plugin_load.h"

perfNet net;

void loadPlugin(void) {
  const char* name = opt.plugin ? opt.plugin : railnetNetPluginName();
  if (strlen(name) >= sizeof(net.path)) die("plugin name too long: %s", name);
  char errs[1200];
  net.lib = pluginOpen(NULL, name, net.path, sizeof(net.path), errs, sizeof(errs));
  if (net.lib == NULL)
    die("cannot load net plugin '%s': %s\n  (is its directory in LD_LIBRARY_PATH? or pass --plugin /path/to/lib.so)", name,
        errs);
  int oldest = opt.abi ? opt.abi : PLUGIN_NET_MIN, newest = opt.abi ? opt.abi : PLUGIN_NET_MAX;
  net.api = pluginFindNet(net.lib, oldest, newest, &net.version);
  if (net.api == NULL && opt.abi) die("%s does not export ncclNetPlugin_v%d", net.path, opt.abi);
  if (net.api == NULL) die("%s exports none of ncclNetPlugin_v8 ... ncclNetPlugin_v12", net.path);
  net.name = pluginNetName(net.api);
}

#define V8 ((const ncclNet_v8_t*)net.api)
#define V9 ((const ncclNet_v9_t*)net.api)
#define V10 ((const ncclNet_v10_t*)net.api)
#define V12 ((const ncclNet_v12_t*)net.api) /* v11 has the same calls */

void netCallFailed(const char* call, ncclResult_t r) {
  static const char* const what[] = {
      "success", "a CUDA call failed", "a system call failed (the plugin's WARN above says which)",
      "an internal error of the plugin", "an invalid argument", "invalid usage",
      "the peer cannot be reached or failed", "still in progress"};
  static const char* const names[] = {"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
                                      "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress"};
  char fn[64];
  size_t n = 0;
  const char* c = strncmp(call, "net", 3) == 0 ? call + 3 : call;
  while (c[n] && c[n] != '(' && n + 1 < sizeof(fn)) fn[n] = c[n], n++;
  fn[n] = '\0';
  if (fn[0] >= 'A' && fn[0] <= 'Z') fn[0] = (char)(fn[0] - 'A' + 'a');
  int k = (int)r;
  if (k < 0 || k >= (int)(sizeof(what) / sizeof(what[0])))
    die("%s: %s failed with result %d", net.name, fn, k);
  die("%s: %s failed: %s (%s)%s", net.name, fn, what[k], names[k],
      pluginLog.level >= NCCL_LOG_WARN ? "; the plugin's WARN above says why" : "");
}

/* NCCL_DEBUG as NCCL reads it: INFO (or TRACE) the INFO lines too, WARN the WARNs, NONE or
 * VERSION nothing of the plugin's; unset, railnet-perf shows the WARNs. -v is INFO. */
static ncclDebugLogLevel logLevel(void) {
  const char* d = railnetParamStrByName("NCCL_DEBUG");
  if (opt.verbose) return NCCL_LOG_TRACE;
  if (d == NULL || d[0] == '\0') return NCCL_LOG_WARN;
  if (strcasecmp(d, "INFO") == 0) return NCCL_LOG_INFO;
  if (strcasecmp(d, "TRACE") == 0) return NCCL_LOG_TRACE;
  if (strcasecmp(d, "NONE") == 0 || strcasecmp(d, "VERSION") == 0) return NCCL_LOG_NONE;
  return NCCL_LOG_WARN;
}

ncclResult_t netInit(void) {
  pluginLog.level = logLevel();
  ncclResult_t r = pluginNetInit(net.api, net.version, &net.ctx, 0, NULL, pluginLogger);
  net.name = pluginNetName(net.api); /* railnet publishes its transport's name at init */
  return r;
}
ncclResult_t netDevices(int* n) { return V8->devices(n); }
ncclResult_t netProps(int dev, devProps* out) {
  union {
    ncclNetProperties_v8_t v8;
    ncclNetProperties_v9_t v9;
    ncclNetProperties_v11_t v11;
    ncclNetProperties_v12_t v12;
  } p;
  memset(&p, 0, sizeof(p));
  ncclResult_t r;
  if (net.version == 8) {
    r = V8->getProperties(dev, &p.v8);
    out->speed = p.v8.speed;
    out->ptrSupport = p.v8.ptrSupport;
    out->maxRecvs = p.v8.maxRecvs;
  } else if (net.version <= 10) {
    r = V9->getProperties(dev, &p.v9);
    out->speed = p.v9.speed;
    out->ptrSupport = p.v9.ptrSupport;
    out->maxRecvs = p.v9.maxRecvs;
  } else {
    r = V12->getProperties(dev, (ncclNetProperties_v12_t*)&p);
    out->speed = net.version == 11 ? p.v11.speed : p.v12.speed;
    out->ptrSupport = net.version == 11 ? p.v11.ptrSupport : p.v12.ptrSupport;
    out->maxRecvs = net.version == 11 ? p.v11.maxRecvs : p.v12.maxRecvs;
  }
  out->name = p.v8.name;
  return r;
}
ncclResult_t netListen(int dev, void* handle, void** lc) {
  return net.version >= 11 ? V12->listen(net.ctx, dev, handle, lc) : V8->listen(dev, handle, lc);
}
ncclResult_t netConnect(int dev, void* handle, void** sc) {
  void* devh = NULL;
  ncclNetCommConfig_v10_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  switch (net.version) {
    case 8: return V8->connect(dev, handle, sc, (ncclNetDeviceHandle_v8_t**)&devh);
    case 9: return V9->connect(dev, handle, sc, (ncclNetDeviceHandle_v9_t**)&devh);
    case 10: return V10->connect(dev, &cfg, handle, sc, (ncclNetDeviceHandle_v10_t**)&devh);
    default: return V12->connect(net.ctx, dev, handle, sc, (ncclNetDeviceHandle_v12_t**)&devh);
  }
}
ncclResult_t netAccept(void* lc, void** rc) {
  void* devh = NULL;
  return V8->accept(lc, rc, (ncclNetDeviceHandle_v8_t**)&devh); /* same signature in every version */
}
ncclResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mh) {
  return V8->regMr(comm, data, size, type, mh);
}
ncclResult_t netDeregMr(void* comm, void* mh) { return V8->deregMr(comm, mh); }
ncclResult_t netIsend(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
  switch (net.version) {
    case 8: return V8->isend(sc, data, (int)size, tag, mh, req);
    case 9: return V9->isend(sc, data, size, tag, mh, req);
    case 10: return V10->isend(sc, data, size, tag, mh, NULL, req);
    default: return V12->isend(sc, data, size, tag, mh, NULL, req);
  }
}
ncclResult_t netIrecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mh, void** req) {
  void* phandles[MAX_RECVS] = {NULL};
  switch (net.version) {
    case 8: {
      int s[MAX_RECVS];
      for (int i = 0; i < n; i++) s[i] = (int)sizes[i];
      return V8->irecv(rc, n, data, s, tags, mh, req);
    }
    case 9: return V9->irecv(rc, n, data, sizes, tags, mh, req);
    case 10: return V10->irecv(rc, n, data, sizes, tags, mh, phandles, req);
    default: return V12->irecv(rc, n, data, sizes, tags, mh, phandles, req);
  }
}
/* iflush, test, close*: same signature and place in every version. */
ncclResult_t netIflush(void* rc, int n, void** data, int* sizes, void** mh, void** req) {
  return V8->iflush(rc, n, data, sizes, mh, req);
}
ncclResult_t netTest(void* req, int* done, int* sizes) { return V8->test(req, done, sizes); }
void netCloseSend(void* sc) { V8->closeSend(sc); }
void netCloseRecv(void* rc) { V8->closeRecv(rc); }
void netCloseListen(void* lc) { V8->closeListen(lc); }
void netFinalize(void) {
  if (net.version >= 11 && net.ctx && V12->finalize) V12->finalize(net.ctx);
}

const char* deviceName(void) {
  devProps p = {0};
  NETCALL(netProps(opt.dev, &p));
  return p.name ? p.name : "?";
}

void checkDevice(int recvs, int cuda) {
  devProps p = {0};
  NETCALL(netProps(opt.dev, &p));
  const char* dn = p.name ? p.name : "?";
  if (recvs > p.maxRecvs)
    dieWith(2, "--recvs %d: %s device %d (%s) takes at most %d buffer(s) per irecv (its maxRecvs)", recvs, net.name,
            opt.dev, dn, p.maxRecvs);
  if (cuda && !(p.ptrSupport & NCCL_PTR_CUDA))
    dieWith(2, "--use-cuda: %s device %d (%s) cannot use GPU memory (ptrSupport 0x%x, no NCCL_PTR_CUDA: "
               "GPUDirect RDMA needs the IB transport with nvidia-peermem or DMA-BUF)",
            net.name, opt.dev, dn, (unsigned)p.ptrSupport);
}
