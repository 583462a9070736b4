/*
 * railnet-perf: bandwidth and latency through the ncclNet API of any net plugin, in the
 * spirit of perftest's ib_write_bw / ib_write_lat (same columns).
 *
 *   railnet-perf --server [--port P | --handle-file F]          # receiver
 *   railnet-perf --client HOST [--port P] | --handle-file F      # sender, prints the tables
 *   railnet-perf --loopback                                      # both ends, two processes here
 *
 * The client drives: it sends its settings (sizes, iterations, tests, buffers per irecv,
 * comm pairs, CUDA) as the first message, so the server needs only --plugin/--dev. Data
 * goes client -> server over --comms comms; as many comms server -> client carry the acks
 * (with the receiver's byte counts) and the pongs of the latency test.
 * Run with --help for every option.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <railnet_net/net.h>
#include "launch.h"

#define PERF_MAGIC 0x7261696c70657266ULL /* "railperf" */
#define MAX_SIZES 64
#define MAX_RECVS 8  /* --recvs: NCCL's largest multi-receive (NCCL_NET_IB_MAX_RECVS) */
#define MAX_COMMS 16 /* --comms */
#define CTRL_SIZE 4096

/* ================================================================ options */

static struct {
  const char* plugin;
  int dev;
  int server, loopback;
  const char* client;
  int port;
  const char* handleFile;
  size_t minSize, maxSize;
  int iters, warmup, window;
  int bw, lat;
  int json, csv;
  int timeoutSec;
  int verbose;
  int abi;   /* 0: newest the plugin exports */
  int recvs; /* buffers (tags) per irecv */
  int comms; /* send/recv comm pairs */
  int cuda;  /* GPU of --use-cuda, -1 without */
} opt = {NULL, 0, 0, 0, NULL, 18515, NULL, 65536, 65536, 1000, 20, 16, 1, 1, 0, 0, 60, 0, 0, 1, 1, -1};

/* What the client tells the server (first message over data comm 0). */
typedef struct {
  uint64_t magic;
  int32_t nSizes, iters, warmup, window, bw, lat;
  int32_t recvs, comms, cuda, pad;
  uint64_t sizes[MAX_SIZES];
  char handles[MAX_COMMS][NCCL_NET_HANDLE_MAXSIZE]; /* the client's listen handles, one per reverse comm */
} perfConfig;
_Static_assert(sizeof(perfConfig) <= CTRL_SIZE, "config fits the control message");

/* The server's answer (over reverse comm 0): where data comms 1..comms-1 connect. */
typedef struct {
  uint64_t magic;
  int32_t comms, pad;
  char handles[MAX_COMMS][NCCL_NET_HANDLE_MAXSIZE];
} perfReply;
_Static_assert(sizeof(perfReply) <= CTRL_SIZE, "reply fits the control message");

/* Server -> client after each size (and to stay in step): what the receiver counted. */
typedef struct {
  uint64_t magic;
  int64_t bytes, buffers, messages; /* sizes test() reported, summed; buffers; irecvs */
  int32_t ok, pad;                  /* sizes and contents right */
} perfAck;

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Exit status: 1 a failure; 2 a usage error or a setting this host or plugin cannot run. */
static void dieWith(int status, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static pid_t serverChild; /* --loopback: the server process, ended when the client dies */
static void dieWith(int status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stdout);
  fprintf(stderr, "railnet-perf: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (serverChild > 0) {
    kill(serverChild, SIGTERM);
    waitpid(serverChild, NULL, 0);
  }
  exit(status);
}
#define die(...) dieWith(1, __VA_ARGS__)

/* ================================================================ CUDA (--use-cuda), by dlopen */

/* The few driver API calls used, declared here: no CUDA header or library at build time. */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef unsigned long long CUdeviceptr;

typedef struct {
  int gpu; /* -1: host buffers */
  CUdevice dev;
  CUcontext ctx;
  CUresult (*init)(unsigned int);
  CUresult (*deviceGetCount)(int*);
  CUresult (*deviceGet)(CUdevice*, int);
  CUresult (*primaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*primaryCtxRelease)(CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*memAlloc)(CUdeviceptr*, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*memcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*memcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*memsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*getErrorName)(CUresult, const char**);
} cudaApi;
static cudaApi cu = {.gpu = -1};

static const char* cuErr(CUresult r) {
  const char* s = NULL;
  if (cu.getErrorName == NULL || cu.getErrorName(r, &s) != 0 || s == NULL) {
    static char buf[32];
    snprintf(buf, sizeof(buf), "CUresult %d", r);
    return buf;
  }
  return s;
}
#define CUCHECK(call, status, ...)                                                        \
  do {                                                                                    \
    CUresult r_ = (call);                                                                 \
    if (r_ != 0) {                                                                        \
      char what_[256];                                                                    \
      snprintf(what_, sizeof(what_), __VA_ARGS__);                                        \
      dieWith(status, "--use-cuda=%d: %s: %s", cu.gpu, what_, cuErr(r_));                 \
    }                                                                                     \
  } while (0)

/* Loads libcuda.so.1 and makes GPU gpu's primary context current; exits 2 with one line
 * saying what is missing when there is no driver or no such GPU. */
static void cudaSetup(int gpu) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* err = dlerror();
    if (err && strstr(err, "No such file"))
      dieWith(2, "--use-cuda: libcuda.so.1 not found (no NVIDIA driver on this host)");
    dieWith(2, "--use-cuda: cannot load libcuda.so.1: %s", err ? err : "?");
  }
  static const struct {
    const char* name;
    const char* fallback;
    size_t off;
  } syms[] = {
#define CUSYM(field, name, fallback) {name, fallback, offsetof(cudaApi, field)}
      CUSYM(init, "cuInit", NULL),
      CUSYM(deviceGetCount, "cuDeviceGetCount", NULL),
      CUSYM(deviceGet, "cuDeviceGet", NULL),
      CUSYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
      CUSYM(primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
      CUSYM(ctxSetCurrent, "cuCtxSetCurrent", NULL),
      CUSYM(memAlloc, "cuMemAlloc_v2", NULL),
      CUSYM(memFree, "cuMemFree_v2", NULL),
      CUSYM(memcpyHtoD, "cuMemcpyHtoD_v2", NULL),
      CUSYM(memcpyDtoH, "cuMemcpyDtoH_v2", NULL),
      CUSYM(memsetD8, "cuMemsetD8_v2", NULL),
      CUSYM(getErrorName, "cuGetErrorName", NULL),
#undef CUSYM
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    void* f = dlsym(lib, syms[i].name);
    if (f == NULL && syms[i].fallback) f = dlsym(lib, syms[i].fallback);
    if (f == NULL) dieWith(2, "--use-cuda: libcuda.so.1 has no %s (NVIDIA driver too old?)", syms[i].name);
    memcpy((char*)&cu + syms[i].off, &f, sizeof(f));
  }
  cu.gpu = gpu;
  CUCHECK(cu.init(0), 2, "cuInit (the driver sees no usable GPU; check nvidia-smi)");
  int n = 0;
  CUCHECK(cu.deviceGetCount(&n), 2, "cuDeviceGetCount");
  if (gpu >= n) dieWith(2, "--use-cuda=%d: cuDeviceGet(GPU %d): only %d GPU%s", gpu, gpu, n, n == 1 ? "" : "s");
  CUCHECK(cu.deviceGet(&cu.dev, gpu), 2, "cuDeviceGet(GPU %d)", gpu);
  CUCHECK(cu.primaryCtxRetain(&cu.ctx, cu.dev), 2, "cuDevicePrimaryCtxRetain(GPU %d)", gpu);
  CUCHECK(cu.ctxSetCurrent(cu.ctx), 2, "cuCtxSetCurrent(GPU %d)", gpu);
}

static void cudaTeardown(void) {
  if (cu.gpu >= 0 && cu.ctx) cu.primaryCtxRelease(cu.dev);
  cu.ctx = NULL;
}

/* Buffers of the data path: host memory, or GPU memory with --use-cuda. */
static char* bufAlloc(size_t bytes) {
  if (cu.gpu < 0) {
    void* p = NULL;
    if (posix_memalign(&p, 4096, bytes)) die("cannot allocate %zu bytes", bytes);
    return p;
  }
  CUdeviceptr d = 0;
  CUCHECK(cu.memAlloc(&d, bytes), 1, "cuMemAlloc(%zu bytes)", bytes);
  return (char*)(uintptr_t)d;
}
static void bufFree(char* p) {
  if (p == NULL) return;
  if (cu.gpu < 0) free(p);
  else CUCHECK(cu.memFree((CUdeviceptr)(uintptr_t)p), 1, "cuMemFree");
}
static void bufWrite(char* dst, const char* host, size_t n) {
  if (cu.gpu < 0) memcpy(dst, host, n);
  else CUCHECK(cu.memcpyHtoD((CUdeviceptr)(uintptr_t)dst, host, n), 1, "cuMemcpyHtoD(%zu bytes)", n);
}
/* The n bytes at src, readable by the CPU: src itself, or a copy in stage. */
static const char* bufRead(char* stage, const char* src, size_t n) {
  if (cu.gpu < 0) return src;
  CUCHECK(cu.memcpyDtoH(stage, (CUdeviceptr)(uintptr_t)src, n), 1, "cuMemcpyDtoH(%zu bytes)", n);
  return stage;
}
static void bufClear(char* p, size_t n) {
  if (cu.gpu < 0) memset(p, 0, n);
  else CUCHECK(cu.memsetD8((CUdeviceptr)(uintptr_t)p, 0, n), 1, "cuMemsetD8(%zu bytes)", n);
}
static const char* memoryName(void) { return cu.gpu < 0 ? "host" : "cuda"; }

/* ================================================================ plugin, any ABI v8..v12 */

static struct {
  int version;
  void* lib;
  const void* api;
  void* ctx; /* v11+ */
  char path[512];
  const char* name;
} net;

static void perfLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  if (level > NCCL_LOG_WARN && !opt.verbose) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_WARN) fprintf(stderr, "NCCL WARN %s:%d %s\n", file, line, msg);
  else fprintf(stderr, "NCCL INFO %s\n", msg);
}

#define NETCALL(call)                                                                        \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess) die("%s: %s failed with result %d", net.name, #call, (int)r_);   \
  } while (0)

/* NCCL's rule: NCCL_NET_PLUGIN=<name> loads libnccl-net-<name>.so, else <name> itself. */
static void loadPlugin(void) {
  const char* name = opt.plugin ? opt.plugin : railnetNetPluginName();
  char candidates[2][512];
  snprintf(candidates[0], sizeof(candidates[0]), "libnccl-net-%s.so", name);
  if (strlen(name) >= sizeof(candidates[1])) die("plugin name too long: %s", name);
  memcpy(candidates[1], name, strlen(name) + 1);
  char errs[1200] = "";
  for (int i = 0; i < 2 && net.lib == NULL; i++) {
    net.lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (net.lib) memcpy(net.path, candidates[i], sizeof(net.path));
    else snprintf(errs + strlen(errs), sizeof(errs) - strlen(errs), "%s%s", i ? "; " : "", dlerror());
  }
  if (net.lib == NULL)
    die("cannot load net plugin '%s': %s\n  (is its directory in LD_LIBRARY_PATH? or pass --plugin /path/to/lib.so)", name,
        errs);
  static const char* syms[] = {"ncclNetPlugin_v12", "ncclNetPlugin_v11", "ncclNetPlugin_v10", "ncclNetPlugin_v9",
                               "ncclNetPlugin_v8"};
  for (int i = 0; i < 5 && net.api == NULL; i++) {
    if (opt.abi && opt.abi != 12 - i) continue;
    net.api = dlsym(net.lib, syms[i]);
    net.version = 12 - i;
  }
  if (net.api == NULL && opt.abi) die("%s does not export ncclNetPlugin_v%d", net.path, opt.abi);
  if (net.api == NULL) die("%s exports none of ncclNetPlugin_v8 ... ncclNetPlugin_v12", net.path);
  net.name = ((const ncclNet_v8_t*)net.api)->name; /* name is the first field of every version */
}

#define V8 ((const ncclNet_v8_t*)net.api)
#define V9 ((const ncclNet_v9_t*)net.api)
#define V10 ((const ncclNet_v10_t*)net.api)
#define V12 ((const ncclNet_v12_t*)net.api) /* v11 has the same calls */

static ncclResult_t netInit(void) {
  ncclResult_t r;
  switch (net.version) {
    case 8: r = V8->init(perfLogger); break;
    case 9: r = V9->init(perfLogger); break;
    case 10: r = V10->init(perfLogger, NULL); break;
    default: r = V12->init(&net.ctx, 0, NULL, perfLogger, NULL); break;
  }
  net.name = ((const ncclNet_v8_t*)net.api)->name; /* railnet publishes its transport's name at init */
  return r;
}
static ncclResult_t netDevices(int* n) { return V8->devices(n); }
/* What railnet-perf needs of a device's properties, from any version's struct. */
typedef struct {
  const char* name;
  int speed; /* Mb/s */
  int ptrSupport, maxRecvs;
} devProps;
static ncclResult_t netProps(int dev, devProps* out) {
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
static ncclResult_t netListen(int dev, void* handle, void** lc) {
  return net.version >= 11 ? V12->listen(net.ctx, dev, handle, lc) : V8->listen(dev, handle, lc);
}
static ncclResult_t netConnect(int dev, void* handle, void** sc) {
  void* devh = NULL;
  ncclNetCommConfig_v10_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  switch (net.version) {
    case 8: return V8->connect(dev, handle, sc, (ncclNetDeviceHandle_v8_t**)&devh);
    case 9: return V9->connect(dev, handle, sc, (ncclNetDeviceHandle_v9_t**)&devh);
    case 10: return V10->connect(dev, &cfg, handle, sc, (ncclNetDeviceHandle_v10_t**)&devh);
    default: return V12->connect(net.ctx, dev, handle, sc, (ncclNetDeviceHandle_v12_t**)&devh);
  }
}
static ncclResult_t netAccept(void* lc, void** rc) {
  void* devh = NULL;
  return V8->accept(lc, rc, (ncclNetDeviceHandle_v8_t**)&devh); /* same signature in every version */
}
static ncclResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mh) {
  return V8->regMr(comm, data, size, type, mh);
}
static ncclResult_t netDeregMr(void* comm, void* mh) { return V8->deregMr(comm, mh); }
static ncclResult_t netIsend(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
  switch (net.version) {
    case 8: return V8->isend(sc, data, (int)size, tag, mh, req);
    case 9: return V9->isend(sc, data, size, tag, mh, req);
    case 10: return V10->isend(sc, data, size, tag, mh, NULL, req);
    default: return V12->isend(sc, data, size, tag, mh, NULL, req);
  }
}
/* One irecv of n buffers (NCCL's multi-receive): data[i], sizes[i], tags[i], mh[i]. */
static ncclResult_t netIrecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mh, void** req) {
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
static ncclResult_t netIflush(void* rc, int n, void** data, int* sizes, void** mh, void** req) {
  return V8->iflush(rc, n, data, sizes, mh, req);
}
static ncclResult_t netTest(void* req, int* done, int* sizes) { return V8->test(req, done, sizes); }
static void netFinalize(void) {
  if (net.version >= 11 && net.ctx && V12->finalize) V12->finalize(net.ctx);
}


/* ================================================================ transfers */

/* One message: an irecv of `recvs` buffers (tags 0..recvs-1) on the receiver, as many
 * isends with those tags on the sender, all on comm pair `comm`. */
typedef struct {
  void* req[MAX_RECVS];
  int n, comm;
} msgReqs;

/* What test() reported for the messages of one stream. */
typedef struct {
  long long bytes, buffers, messages, badSizes;
} tally;

typedef struct {
  int n;     /* comm pairs */
  int recvs; /* buffers per irecv */
  void* sendComm[MAX_COMMS];
  void* recvComm[MAX_COMMS];
  void* listenComm[MAX_COMMS];
  void* smh[MAX_COMMS];
  void* rmh[MAX_COMMS];
  char *sbuf, *rbuf; /* recvs slots of stride bytes each: host memory or GPU addresses */
  size_t stride;
  char* expect; /* host: what every slot holds (the send pattern) */
  char* stage;  /* host: a slot copied back from the GPU for the check */
  /* Settings, acks and handles travel in host memory on comm pair 0. */
  char ctrlSend[CTRL_SIZE] __attribute__((aligned(64)));
  char ctrlRecv[CTRL_SIZE] __attribute__((aligned(64)));
  void *csmh, *crmh;
  int dataReg, ctrlSendReg, ctrlRecvReg; /* what closeEnds deregisters */
  msgReqs q[MAX_COMMS * NCCL_NET_MAX_REQUESTS];
  double deadline;
} ends;

/* Not done yet: give the transport's threads the core (this tool often shares few cores with them). */
static void checkDeadline(const ends* e, const char* what) {
  sched_yield();
  if (nowSec() > e->deadline)
    die("%s did not complete within %d s (peer gone? see --timeout)", what, opt.timeoutSec);
}

/* Post until the transport takes the request (a NULL request means "not now"). */
static void* postSend(ends* e, int c, void* data, size_t size, void* mh, int tag) {
  void* req = NULL;
  while (req == NULL) {
    NETCALL(netIsend(e->sendComm[c], data, size, tag, mh, &req));
    if (req == NULL) checkDeadline(e, "isend");
  }
  return req;
}
/* One irecv of n buffers of size bytes at base, base + stride, ... */
static void* postRecv(ends* e, int c, int n, char* base, size_t stride, size_t size, void* mh) {
  void* data[MAX_RECVS];
  void* mhs[MAX_RECVS];
  size_t sizes[MAX_RECVS];
  int tags[MAX_RECVS];
  for (int k = 0; k < n; k++) {
    data[k] = base + (size_t)k * stride;
    sizes[k] = size;
    tags[k] = k;
    mhs[k] = mh;
  }
  void* req = NULL;
  while (req == NULL) {
    NETCALL(netIrecv(e->recvComm[c], n, data, sizes, tags, mhs, &req));
    if (req == NULL) checkDeadline(e, "irecv");
  }
  return req;
}
static void waitReq(ends* e, void* req) {
  int done = 0, sizes[MAX_RECVS];
  while (!done) {
    NETCALL(netTest(req, &done, sizes));
    if (!done) checkDeadline(e, "a transfer");
  }
}

/* GPU buffers: make the received data visible to the GPU, as NCCL does after a receive. */
static void flushRecv(ends* e, int c, size_t size) {
  if (cu.gpu < 0) return;
  void* data[MAX_RECVS];
  void* mhs[MAX_RECVS];
  int sizes[MAX_RECVS];
  for (int k = 0; k < e->recvs; k++) {
    data[k] = e->rbuf + (size_t)k * e->stride;
    mhs[k] = e->rmh[c];
    sizes[k] = (int)size;
  }
  void* req = NULL;
  NETCALL(netIflush(e->recvComm[c], e->recvs, data, sizes, mhs, &req));
  if (req) waitReq(e, req); /* NULL: this transport needs no flush */
}

static void postMsg(ends* e, int isSend, int c, size_t size, msgReqs* m) {
  m->comm = c;
  if (isSend) {
    m->n = e->recvs;
    for (int k = 0; k < e->recvs; k++) m->req[k] = postSend(e, c, e->sbuf + (size_t)k * e->stride, size, e->smh[c], k);
  } else {
    m->n = 1;
    m->req[0] = postRecv(e, c, e->recvs, e->rbuf, e->stride, size, e->rmh[c]);
  }
}
/* 1 once every request of m completed; what test() reported goes into t. */
static int testMsg(ends* e, int isSend, size_t size, msgReqs* m, tally* t) {
  for (int k = 0; k < m->n; k++) {
    if (m->req[k] == NULL) continue;
    int done = 0, sizes[MAX_RECVS] = {0};
    NETCALL(netTest(m->req[k], &done, sizes));
    if (!done) return 0;
    m->req[k] = NULL;
    int nb = isSend ? 1 : e->recvs; /* a receive reports one size per buffer */
    for (int j = 0; j < nb; j++) {
      t->bytes += sizes[j];
      t->buffers++;
      if (sizes[j] < 0 || (size_t)sizes[j] != size) t->badSizes++;
    }
  }
  if (!isSend) flushRecv(e, m->comm, size);
  t->messages++;
  return 1;
}
static void waitMsg(ends* e, int isSend, size_t size, msgReqs* m, tally* t) {
  while (!testMsg(e, isSend, size, m, t)) checkDeadline(e, isSend ? "isend" : "irecv");
}

/* A progress line on stderr (a terminal only) when one size runs for more than 2 s. */
static double progressStart, progressLast;
static int progressShown;
static void progress(const char* test, size_t size, int done, int total) {
  double now = nowSec();
  if (done == 0) {
    progressStart = progressLast = now;
    return;
  }
  if (progressStart == 0 || now - progressStart < 2 || now - progressLast < 1 || !isatty(2)) return;
  progressLast = now;
  progressShown = 1;
  fprintf(stderr, "\r  %s %zu bytes: %d/%d messages, %.0f s ", test, size, done, total, now - progressStart);
}
static void progressEnd(void) {
  if (progressShown) fprintf(stderr, "\r%60s\r", "");
  progressShown = 0;
}

/* n messages of size bytes per buffer, message i on comm pair i % e->n, at most window
 * in flight per comm; what test() reported is added to t. When stamps is not NULL,
 * stamps[i] is when message i completed. */
static void stream(ends* e, int isSend, size_t size, int n, int window, tally* t, double* stamps) {
  tally ignored = {0};
  if (t == NULL) t = &ignored;
  if (window > NCCL_NET_MAX_REQUESTS) window = NCCL_NET_MAX_REQUESTS;
  int cap = window * e->n; /* consecutive messages: at most window on each comm */
  int head = 0, tail = 0;  /* posted [tail, head) */
  while (tail < n) {
    while (head < n && head - tail < cap) {
      postMsg(e, isSend, head % e->n, size, &e->q[head % cap]);
      head++;
    }
    if (!testMsg(e, isSend, size, &e->q[tail % cap], t)) {
      checkDeadline(e, isSend ? "isend" : "irecv");
      continue;
    }
    if (stamps) stamps[tail] = nowSec();
    tail++;
    if ((tail & 63) == 0) progress(isSend ? "bw" : "recv", size, tail, n);
  }
}

/* The small messages both sides use to stay in step; the server's carry its counts. */
static void sendAck(ends* e, const perfAck* a) {
  perfAck none = {PERF_MAGIC, 0, 0, 0, 1, 0};
  memcpy(e->ctrlSend, a ? a : &none, sizeof(perfAck));
  waitReq(e, postSend(e, 0, e->ctrlSend, sizeof(perfAck), e->csmh, 0));
}
static perfAck recvAck(ends* e) {
  perfAck a;
  waitReq(e, postRecv(e, 0, 1, e->ctrlRecv, 0, sizeof(perfAck), e->crmh));
  memcpy(&a, e->ctrlRecv, sizeof(a));
  if (a.magic != PERF_MAGIC) die("the peer sent a malformed ack");
  return a;
}

/* Set-up of the comm pairs (see runServer/runClient for the order both sides follow). */
static void acceptOn(ends* e, int c, const char* what) {
  while (e->recvComm[c] == NULL) {
    NETCALL(netAccept(e->listenComm[c], &e->recvComm[c]));
    if (e->recvComm[c] == NULL) checkDeadline(e, what);
  }
}
static void connectTo(ends* e, int c, void* handle, const char* what) {
  while (e->sendComm[c] == NULL) {
    NETCALL(netConnect(opt.dev, handle, &e->sendComm[c]));
    if (e->sendComm[c] == NULL) checkDeadline(e, what);
  }
}

static void closeEnds(ends* e) {
  for (int c = 0; c < e->n && e->dataReg; c++) {
    NETCALL(netDeregMr(e->sendComm[c], e->smh[c]));
    NETCALL(netDeregMr(e->recvComm[c], e->rmh[c]));
  }
  if (e->ctrlSendReg) NETCALL(netDeregMr(e->sendComm[0], e->csmh));
  if (e->ctrlRecvReg) NETCALL(netDeregMr(e->recvComm[0], e->crmh));
  for (int c = 0; c < MAX_COMMS; c++) {
    if (e->sendComm[c]) V8->closeSend(e->sendComm[c]);
    if (e->recvComm[c]) V8->closeRecv(e->recvComm[c]);
    if (e->listenComm[c]) V8->closeListen(e->listenComm[c]);
  }
  netFinalize();
  bufFree(e->sbuf);
  bufFree(e->rbuf);
  free(e->expect);
  free(e->stage);
  cudaTeardown();
}

/* ================================================================ reporting */

static const char* line = "---------------------------------------------------------------------------------------";

static void bwHeader(void) {
  if (opt.json || opt.csv) {
    if (opt.csv)
      printf("test,bytes,iterations,bw_peak_MBps,bw_avg_MBps,msg_rate_Mpps,recvs,comms,memory,bytes_sent,"
             "recv_messages,recv_buffers,recv_bytes,recv_check\n");
    return;
  }
  printf("%s\n %-10s %-13s %-18s %-20s %s\n", line, "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]",
         "MsgRate[Mpps]");
}
static int jsonRows;
static void bwRow(size_t size, int iters, double peak, double avg, double mpps, long long sent, const perfAck* a) {
  const char* check = a->ok ? "ok" : "wrong";
  if (opt.csv)
    printf("bw,%zu,%d,%.2f,%.2f,%.6f,%d,%d,%s,%lld,%lld,%lld,%lld,%s\n", size, iters, peak, avg, mpps, opt.recvs,
           opt.comms, memoryName(), sent, (long long)a->messages, (long long)a->buffers, (long long)a->bytes, check);
  else if (opt.json)
    printf("%s{\"test\":\"bw\",\"bytes\":%zu,\"iterations\":%d,\"bw_peak_MBps\":%.2f,\"bw_avg_MBps\":%.2f,"
           "\"msg_rate_Mpps\":%.6f,\"bytes_sent\":%lld,\"recv_messages\":%lld,\"recv_buffers\":%lld,"
           "\"recv_bytes\":%lld,\"recv_check\":\"%s\"}",
           jsonRows++ ? ",\n " : "", size, iters, peak, avg, mpps, sent, (long long)a->messages,
           (long long)a->buffers, (long long)a->bytes, check);
  else printf(" %-10zu %-13d %-18.2f %-20.2f %.6f\n", size, iters, peak, avg, mpps);
  fflush(stdout);
}
static void latHeader(void) {
  if (opt.json || opt.csv) {
    if (opt.csv)
      printf("test,bytes,iterations,t_min_us,t_max_us,t_typical_us,t_avg_us,t_stdev_us,t_99_us,recvs,comms,memory,"
             "recv_messages,recv_buffers,recv_bytes,recv_check\n");
    return;
  }
  printf("%s\n %-10s %-12s %-12s %-12s %-16s %-12s %-14s %s\n", line, "#bytes", "#iterations", "t_min[usec]",
         "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]");
}
static double squareRoot(double x) { /* no libm in the tools' link line */
  if (x <= 0) return 0;
  double r = x > 1 ? x : 1;
  for (int i = 0; i < 100; i++) r = 0.5 * (r + x / r);
  return r;
}
static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}
static void latRow(size_t size, int iters, double* t, const perfAck* a) {
  qsort(t, (size_t)iters, sizeof(double), cmpDouble);
  double sum = 0, sq = 0;
  for (int i = 0; i < iters; i++) sum += t[i];
  double avg = sum / iters;
  for (int i = 0; i < iters; i++) sq += (t[i] - avg) * (t[i] - avg);
  double sd = squareRoot(sq / iters), p99 = t[(int)((iters - 1) * 0.99)];
  const char* check = a->ok ? "ok" : "wrong";
  if (opt.csv)
    printf("lat,%zu,%d,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%d,%d,%s,%lld,%lld,%lld,%s\n", size, iters, t[0], t[iters - 1],
           t[iters / 2], avg, sd, p99, opt.recvs, opt.comms, memoryName(), (long long)a->messages,
           (long long)a->buffers, (long long)a->bytes, check);
  else if (opt.json)
    printf("%s{\"test\":\"lat\",\"bytes\":%zu,\"iterations\":%d,\"t_min_us\":%.2f,\"t_max_us\":%.2f,"
           "\"t_typical_us\":%.2f,\"t_avg_us\":%.2f,\"t_stdev_us\":%.2f,\"t_99_us\":%.2f,\"recv_messages\":%lld,"
           "\"recv_buffers\":%lld,\"recv_bytes\":%lld,\"recv_check\":\"%s\"}",
           jsonRows++ ? ",\n " : "", size, iters, t[0], t[iters - 1], t[iters / 2], avg, sd, p99,
           (long long)a->messages, (long long)a->buffers, (long long)a->bytes, check);
  else
    printf(" %-10zu %-12d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %.2f\n", size, iters, t[0], t[iters - 1], t[iters / 2],
           avg, sd, p99);
  fflush(stdout);
}
/* The settings line of both ends' text output. */
static void settingsLine(const char* who) {
  if (opt.json || opt.csv) return;
  char mem[32] = "host";
  if (cu.gpu >= 0) snprintf(mem, sizeof(mem), "CUDA (GPU %d)", cu.gpu);
  printf(" Settings%s: %d buffer(s) per irecv, %d comm pair(s), %s memory\n", who, opt.recvs, opt.comms, mem);
}

/* ================================================================ the two roles */

/* Byte i of buffer slot k: distinct per slot, so a buffer landing in the wrong slot shows. */
static char slotByte(size_t i, int k) { return (char)(i * 7 + 1 + (size_t)k * 29); }

/* recvs slots of the largest size per direction, registered on every comm of that direction. */
static void setupBuffers(ends* e, size_t maxSize) {
  int type = cu.gpu < 0 ? NCCL_PTR_HOST : NCCL_PTR_CUDA;
  e->stride = ((maxSize ? maxSize : 1) + 4095) / 4096 * 4096;
  size_t total = e->stride * (size_t)e->recvs;
  e->expect = malloc(total);
  if (e->expect == NULL || (cu.gpu >= 0 && (e->stage = malloc(e->stride)) == NULL))
    die("cannot allocate %zu bytes", total);
  for (int k = 0; k < e->recvs; k++)
    for (size_t i = 0; i < e->stride; i++) e->expect[(size_t)k * e->stride + i] = slotByte(i, k);
  e->sbuf = bufAlloc(total);
  e->rbuf = bufAlloc(total);
  bufWrite(e->sbuf, e->expect, total);
  bufClear(e->rbuf, total);
  for (int c = 0; c < e->n; c++) {
    NETCALL(netRegMr(e->sendComm[c], e->sbuf, total, type, &e->smh[c]));
    NETCALL(netRegMr(e->recvComm[c], e->rbuf, total, type, &e->rmh[c]));
  }
  e->dataReg = 1;
}
static void clearSlots(ends* e, size_t size) {
  for (int k = 0; k < e->recvs; k++) bufClear(e->rbuf + (size_t)k * e->stride, size);
}
/* Every slot holds the sender's pattern for its first size bytes. */
static int slotsRight(ends* e, size_t size) {
  for (int k = 0; k < e->recvs; k++) {
    size_t off = (size_t)k * e->stride;
    if (memcmp(bufRead(e->stage, e->rbuf + off, size), e->expect + off, size) != 0) return 0;
  }
  return 1;
}

static void printDevice(void) {
  int ndev = 0;
  devProps p = {0};
  NETCALL(netDevices(&ndev));
  if (opt.dev < 0 || opt.dev >= ndev) die("%s has %d device(s); --dev %d does not exist", net.name, ndev, opt.dev);
  NETCALL(netProps(opt.dev, &p));
  if (opt.json || opt.csv) return;
  printf("%s\n railnet-perf: %s through %s (ncclNet v%d)\n Device: [%d] %s, %d Mb/s (%d device(s))\n", line, net.name,
         net.path, net.version, opt.dev, p.name ? p.name : "?", p.speed, ndev);
}

/* The name of the device in use, for the --json documents. */
static const char* deviceName(void) {
  devProps p = {0};
  NETCALL(netProps(opt.dev, &p));
  return p.name ? p.name : "?";
}

/* What the device must take for these settings; exit 2 naming the limit otherwise. */
static void checkDevice(int recvs, int cuda) {
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

/* Server: takes the settings from the client, receives the sweep, acks each size with its
 * counts, answers pings. Set-up order (the client mirrors it):
 *   1. accept data comm 0 on the listen comm whose handle the client got; receive the settings
 *   2. connect the reverse comms 0..comms-1 to the client's handles
 *   3. listen comms-1 more times; send those handles over reverse comm 0
 *   4. accept data comms 1..comms-1, one per listen comm */
static int runServer(void* listenComm) {
  static ends e;
  e.n = 1;
  e.recvs = 1;
  e.listenComm[0] = listenComm;
  e.deadline = nowSec() + opt.timeoutSec;
  acceptOn(&e, 0, "accept");
  NETCALL(netRegMr(e.recvComm[0], e.ctrlRecv, sizeof(e.ctrlRecv), NCCL_PTR_HOST, &e.crmh));
  e.ctrlRecvReg = 1;
  waitReq(&e, postRecv(&e, 0, 1, e.ctrlRecv, 0, sizeof(e.ctrlRecv), e.crmh));
  perfConfig cfg;
  memcpy(&cfg, e.ctrlRecv, sizeof(cfg));
  if (cfg.magic != PERF_MAGIC || cfg.nSizes <= 0 || cfg.nSizes > MAX_SIZES || cfg.recvs < 1 ||
      cfg.recvs > MAX_RECVS || cfg.comms < 1 || cfg.comms > MAX_COMMS || cfg.window < 1 || cfg.iters < 1 ||
      cfg.warmup < 0)
    die("the client sent no valid settings");
  e.n = opt.comms = cfg.comms;
  e.recvs = opt.recvs = cfg.recvs;
  if (cu.gpu < 0 && cfg.cuda >= 0) cudaSetup(opt.cuda >= 0 ? opt.cuda : cfg.cuda);
  checkDevice(cfg.recvs, cu.gpu >= 0);
  for (int c = 0; c < e.n; c++) connectTo(&e, c, cfg.handles[c], "connect back to the client");
  NETCALL(netRegMr(e.sendComm[0], e.ctrlSend, sizeof(e.ctrlSend), NCCL_PTR_HOST, &e.csmh));
  e.ctrlSendReg = 1;
  static perfReply reply;
  reply.magic = PERF_MAGIC;
  reply.comms = e.n;
  for (int c = 1; c < e.n; c++) NETCALL(netListen(opt.dev, reply.handles[c], &e.listenComm[c]));
  memcpy(e.ctrlSend, &reply, sizeof(reply));
  waitReq(&e, postSend(&e, 0, e.ctrlSend, sizeof(reply), e.csmh, 0));
  for (int c = 1; c < e.n; c++) acceptOn(&e, c, "accept the client's data comms");
  size_t maxSize = 0;
  for (int i = 0; i < cfg.nSizes; i++) maxSize = cfg.sizes[i] > maxSize ? cfg.sizes[i] : maxSize;
  setupBuffers(&e, maxSize);
  sendAck(&e, NULL); /* every comm is up */
  settingsLine(" (from the client)");
  if (opt.json)
    printf("{\"role\":\"receiver\",\"plugin\":\"%s\",\"net\":\"%s\",\"abi\":%d,\"dev\":%d,\"device\":\"%s\","
           "\"recvs\":%d,\"comms\":%d,\"memory\":\"%s\",\"gpu\":%d,\"received\":[",
           net.path, net.name, net.version, opt.dev, deviceName(), e.recvs, e.n, memoryName(), cu.gpu);
  else if (!opt.csv)
    printf("%s\n receiver: %-10s %-12s %-16s %s\n", line, "#bytes", "#messages", "bytes received", "check");
  int bad = 0;
  for (int t = 0; t < 2; t++) {
    if ((t == 0 && !cfg.bw) || (t == 1 && !cfg.lat)) continue;
    for (int i = 0; i < cfg.nSizes; i++) {
      size_t size = cfg.sizes[i];
      tally got = {0};
      e.deadline = nowSec() + opt.timeoutSec;
      int n = cfg.warmup + cfg.iters;
      clearSlots(&e, size);
      if (t == 0) {
        stream(&e, 0, size, cfg.warmup, cfg.window, &got, NULL);
        sendAck(&e, NULL);
        stream(&e, 0, size, cfg.iters, cfg.window, &got, NULL);
      } else {
        /* the receive of ping k+1 is posted before pong k goes out, as the client posts its
         * pong receive before its ping: no clear-to-send waits inside the timed round trip */
        msgReqs ping;
        postMsg(&e, 0, 0, size, &ping);
        for (int k = 0; k < n; k++) {
          msgReqs m;
          tally sent = {0};
          waitMsg(&e, 0, size, &ping, &got);
          if (k + 1 < n) postMsg(&e, 0, (k + 1) % e.n, size, &ping);
          postMsg(&e, 1, k % e.n, size, &m);
          waitMsg(&e, 1, size, &m, &sent);
        }
      }
      long long want = (long long)size * e.recvs * n;
      int ok = got.bytes == want && got.buffers == (long long)e.recvs * n && got.messages == n && got.badSizes == 0 &&
               slotsRight(&e, size);
      bad += !ok;
      const char* test = t ? "lat" : "bw";
      if (opt.json)
        printf("%s{\"test\":\"%s\",\"bytes\":%zu,\"messages\":%lld,\"buffers\":%lld,\"bytes_received\":%lld,"
               "\"check\":\"%s\"}",
               jsonRows++ ? ",\n " : "", test, size, got.messages, got.buffers, got.bytes, ok ? "ok" : "wrong");
      else if (opt.csv)
        printf("recv_%s,%zu,%lld,%lld,%s,%lld\n", test, size, got.messages, got.bytes, ok ? "ok" : "wrong", got.buffers);
      else
        printf(" receiver: %-10zu %-12lld %-16lld %s (%s)\n", size, got.messages, got.bytes, ok ? "ok" : "WRONG", test);
      fflush(stdout);
      perfAck a = {PERF_MAGIC, got.bytes, got.buffers, got.messages, ok, 0};
      sendAck(&e, &a);
    }
  }
  if (opt.json) printf("]}\n");
  recvAck(&e); /* the client is done */
  closeEnds(&e);
  if (bad) fprintf(stderr, "railnet-perf: %d size(s) arrived with wrong byte counts, sizes or contents\n", bad);
  return bad ? 1 : 0;
}

static int runClient(char* handle, const size_t* sizes, int nSizes) {
  static ends e;
  e.n = opt.comms;
  e.recvs = opt.recvs;
  e.deadline = nowSec() + opt.timeoutSec;
  static perfConfig cfg;
  cfg.magic = PERF_MAGIC;
  cfg.nSizes = nSizes;
  cfg.iters = opt.iters;
  cfg.warmup = opt.warmup;
  cfg.window = opt.window;
  cfg.bw = opt.bw;
  cfg.lat = opt.lat;
  cfg.recvs = opt.recvs;
  cfg.comms = opt.comms;
  cfg.cuda = opt.cuda;
  for (int i = 0; i < nSizes; i++) cfg.sizes[i] = sizes[i];
  for (int c = 0; c < e.n; c++) NETCALL(netListen(opt.dev, cfg.handles[c], &e.listenComm[c]));
  connectTo(&e, 0, handle, "connect to the server");
  NETCALL(netRegMr(e.sendComm[0], e.ctrlSend, sizeof(e.ctrlSend), NCCL_PTR_HOST, &e.csmh));
  e.ctrlSendReg = 1;
  memcpy(e.ctrlSend, &cfg, sizeof(cfg));
  waitReq(&e, postSend(&e, 0, e.ctrlSend, sizeof(cfg), e.csmh, 0));
  for (int c = 0; c < e.n; c++) acceptOn(&e, c, "accept the server's connection");
  NETCALL(netRegMr(e.recvComm[0], e.ctrlRecv, sizeof(e.ctrlRecv), NCCL_PTR_HOST, &e.crmh));
  e.ctrlRecvReg = 1;
  waitReq(&e, postRecv(&e, 0, 1, e.ctrlRecv, 0, sizeof(e.ctrlRecv), e.crmh));
  static perfReply reply;
  memcpy(&reply, e.ctrlRecv, sizeof(reply));
  if (reply.magic != PERF_MAGIC || reply.comms != e.n) die("the server did not answer the settings");
  for (int c = 1; c < e.n; c++) connectTo(&e, c, reply.handles[c], "connect to the server");
  setupBuffers(&e, sizes[nSizes - 1]);
  recvAck(&e);
  settingsLine("");
  if (opt.json)
    printf("{\"plugin\":\"%s\",\"net\":\"%s\",\"abi\":%d,\"dev\":%d,\"device\":\"%s\",\"recvs\":%d,\"comms\":%d,"
           "\"memory\":\"%s\",\"gpu\":%d,\"results\":[",
           net.path, net.name, net.version, opt.dev, deviceName(), e.recvs, e.n, memoryName(), cu.gpu);
  double* stamps = malloc(sizeof(double) * (size_t)(opt.iters + opt.warmup));
  if (stamps == NULL) die("out of memory");
  int bad = 0;
  if (opt.bw) {
    bwHeader();
    for (int i = 0; i < nSizes; i++) {
      e.deadline = nowSec() + opt.timeoutSec;
      progress("bw", sizes[i], 0, opt.iters);
      stream(&e, 1, sizes[i], opt.warmup, opt.window, NULL, NULL);
      recvAck(&e);
      tally sent = {0};
      double t0 = nowSec();
      stream(&e, 1, sizes[i], opt.iters, opt.window, &sent, stamps);
      /* the clock stops at the last send completion, as ib_write_bw's: the server checks the
       * contents before it acks, and that check is not the network's time */
      double t = stamps[opt.iters - 1] - t0;
      perfAck a = recvAck(&e);
      /* Peak: the fastest stretch of w = max(2 x messages in flight, iters/8) consecutive sender
       * completions, the start counting as one (fewer would time bursts of completions). */
      int inFlight = opt.window * e.n, w = opt.iters / 8 > 2 * inFlight ? opt.iters / 8 : 2 * inFlight;
      if (w > opt.iters) w = opt.iters;
      double best = t;
      for (int k = w; k <= opt.iters; k++) {
        double span = stamps[k - 1] - (k - w == 0 ? t0 : stamps[k - w - 1]);
        if (span > 0 && span * opt.iters / w < best) best = span * opt.iters / w;
      }
      progressEnd();
      double mb = (double)sizes[i] * e.recvs * opt.iters / 1048576.0;
      bwRow(sizes[i], opt.iters, mb / best, mb / t, (double)opt.iters * e.recvs / t / 1e6, sent.bytes, &a);
      bad += !a.ok;
    }
  }
  if (opt.lat) {
    latHeader();
    for (int i = 0; i < nSizes; i++) {
      e.deadline = nowSec() + opt.timeoutSec;
      progress("lat", sizes[i], 0, opt.iters);
      for (int k = 0; k < opt.warmup + opt.iters; k++) {
        if ((k & 63) == 63) progress("lat", sizes[i], k + 1, opt.warmup + opt.iters);
        double t0 = nowSec();
        msgReqs pong, ping;
        tally ignored = {0};
        postMsg(&e, 0, k % e.n, sizes[i], &pong);
        postMsg(&e, 1, k % e.n, sizes[i], &ping);
        waitMsg(&e, 1, sizes[i], &ping, &ignored);
        waitMsg(&e, 0, sizes[i], &pong, &ignored);
        if (k >= opt.warmup) stamps[k - opt.warmup] = (nowSec() - t0) * 1e6 / 2;
      }
      perfAck a = recvAck(&e);
      progressEnd();
      latRow(sizes[i], opt.iters, stamps, &a);
      bad += !a.ok;
    }
  }
  if (opt.json) printf("]}\n");
  else if (!opt.csv) printf("%s\n", line);
  fflush(stdout);
  sendAck(&e, NULL);
  free(stamps);
  closeEnds(&e);
  if (bad) fprintf(stderr, "railnet-perf: the receiver counted wrong bytes, sizes or contents for %d size(s)\n", bad);
  return bad ? 1 : 0;
}

/* ================================================================ handle side channels */

static int writeAll(int fd, const void* p, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, (const char*)p + off, n - off);
    if (w <= 0 && errno != EINTR) return -1;
    if (w > 0) off += (size_t)w;
  }
  return 0;
}
static int readAll(int fd, void* p, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t r = read(fd, (char*)p + off, n - off);
    if (r == 0 || (r < 0 && errno != EINTR)) return -1;
    if (r > 0) off += (size_t)r;
  }
  return 0;
}

/* Server: hand the handle to one TCP client on opt.port. */
static void serveHandleTcp(const char* handle) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  int v4 = 0;
  if (fd < 0) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    v4 = 1;
  }
  if (fd < 0) die("socket: %s", strerror(errno));
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (!v4) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)opt.port), .sin6_addr = in6addr_any};
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port), .sin_addr = {htonl(INADDR_ANY)}};
  int rc = v4 ? bind(fd, (struct sockaddr*)&a4, sizeof(a4)) : bind(fd, (struct sockaddr*)&a6, sizeof(a6));
  if (rc != 0 || listen(fd, 1) != 0)
    die("cannot listen on TCP port %d for the handle exchange: %s (pick another with --port)", opt.port, strerror(errno));
  if (!opt.json && !opt.csv) printf(" Waiting for the client on TCP port %d...\n", opt.port);
  fflush(stdout);
  int c = accept(fd, NULL, NULL);
  if (c < 0) die("accept on port %d: %s", opt.port, strerror(errno));
  uint64_t magic = PERF_MAGIC;
  if (writeAll(c, &magic, sizeof(magic)) || writeAll(c, handle, NCCL_NET_HANDLE_MAXSIZE)) die("sending the handle failed");
  close(c);
  close(fd);
}

static void fetchHandleTcp(const char* host, char* handle) {
  char port[16];
  snprintf(port, sizeof(port), "%d", opt.port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int g = getaddrinfo(host, port, &hints, &res);
  if (g != 0) die("cannot resolve %s: %s", host, gai_strerror(g));
  double deadline = nowSec() + opt.timeoutSec;
  int fd = -1;
  while (fd < 0) {
    for (struct addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
      fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
      if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
      }
    }
    if (fd < 0) {
      if (nowSec() > deadline) die("no server answered on %s:%d within %d s", host, opt.port, opt.timeoutSec);
      usleep(100000);
    }
  }
  freeaddrinfo(res);
  uint64_t magic = 0;
  if (readAll(fd, &magic, sizeof(magic)) || magic != PERF_MAGIC || readAll(fd, handle, NCCL_NET_HANDLE_MAXSIZE))
    die("%s:%d is not a railnet-perf server", host, opt.port);
  close(fd);
}

static void writeHandleFile(const char* path, const char* handle) {
  char tmp[600];
  snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (f == NULL) die("cannot write %s: %s", tmp, strerror(errno));
  for (int i = 0; i < NCCL_NET_HANDLE_MAXSIZE; i++) fprintf(f, "%02x", (unsigned char)handle[i]);
  fprintf(f, "\n");
  fclose(f);
  if (rename(tmp, path) != 0) die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (!opt.json && !opt.csv) printf(" Handle written to %s; waiting for the client...\n", path);
  fflush(stdout);
}

static void readHandleFile(const char* path, char* handle) {
  double deadline = nowSec() + opt.timeoutSec;
  FILE* f;
  while ((f = fopen(path, "r")) == NULL) {
    if (nowSec() > deadline) die("%s did not appear within %d s", path, opt.timeoutSec);
    usleep(100000);
  }
  for (int i = 0; i < NCCL_NET_HANDLE_MAXSIZE; i++) {
    unsigned v;
    if (fscanf(f, "%2x", &v) != 1) die("%s is not a railnet-perf handle file", path);
    handle[i] = (char)v;
  }
  fclose(f);
}


static void usage(FILE* f) {
  fprintf(f,
          "usage: railnet-perf --server [options]          receiver\n"
          "       railnet-perf --client HOST [options]     sender; prints the tables\n"
          "       railnet-perf --loopback [options]        both ends on this host (two processes)\n"
          "Bandwidth and latency through the ncclNet API of a net plugin, like ib_write_bw/ib_write_lat.\n"
          "\n"
          "  --plugin NAME|PATH  plugin to dlopen: libnccl-net-NAME.so, else NAME itself (NCCL's rule);\n"
          "                      default $NCCL_NET_PLUGIN, else railnet. Any ABI v8..v12.\n"
          "  --abi V             use the plugin's ncclNetPlugin_vV (8..12; default the newest it exports)\n"
          "  --dev N             device index of the plugin (default 0)\n"
          "  --port P            TCP port of the handle exchange (default 18515)\n"
          "  --handle-file F     exchange the handle through file F instead (shared file system)\n"
          "  --peer HOST         under a launcher: the host of this client rank's server (rank-1)\n"
          "  -a, --all           sweep sizes 2 B .. 8 MiB (powers of two); see --min-size/--max-size\n"
          "  -s, --size B        one message size (default 65536; sizes take K, M, G suffixes)\n"
          "  --min-size B        smallest size of the sweep (with -a; default 2)\n"
          "  --max-size B        largest size of the sweep (with -a; default 8388608)\n"
          "  -n, --iters N       timed messages per size (default 1000)\n"
          "  --warmup N          untimed messages before each size (default 20)\n"
          "  --window N          messages in flight per comm in the bandwidth test (default 16, max %d)\n"
          "  --recvs N           buffers per irecv, NCCL's multi-receive (1..%d, default 1): the receiver\n"
          "                      posts one irecv of N buffers with tags 0..N-1, the sender one isend per\n"
          "                      tag; -s is the size of each buffer; the plugin's maxRecvs must allow N\n"
          "  --comms N           N send/recv comm pairs on the device (1..%d, default 1); message i goes\n"
          "                      to pair i mod N; results are the sum over all pairs\n"
          "  --use-cuda[=GPU]    buffers in GPU memory (default GPU 0), registered as NCCL_PTR_CUDA;\n"
          "                      loads libcuda.so.1 at run time; exit 2 if it or the GPU is missing\n"
          "  --bw | --lat        run only the bandwidth or only the latency test (default both)\n"
          "  --json | --csv      machine-readable results\n"
          "  --timeout S         give up when connecting, or one size of the sweep, takes longer than\n"
          "                      S seconds (default 60); on a terminal, sizes that run longer than 2 s\n"
          "                      show a progress line on stderr\n"
          "  -v, --verbose       the plugin's INFO lines on stderr\n"
          "  -h, --help          this text\n"
          "\n"
          "The client sends its settings (sizes, iterations, --window, --recvs, --comms, --use-cuda) to the\n"
          "server, so the server needs only --plugin/--dev/--port (and --use-cuda=GPU to pick its own GPU).\n"
          "Without --server/--client/--loopback, the rank from OMPI_COMM_WORLD_RANK, PMI_RANK or\n"
          "SLURM_PROCID picks the role: even ranks serve, odd ranks are clients of rank-1; pair k\n"
          "(ranks 2k, 2k+1) uses port P+k, or the file F.k with --handle-file F; clients need --peer\n"
          "or --handle-file. BW in MB/sec is 2^20 bytes per second (as perftest) and counts every buffer;\n"
          "MsgRate counts isends; latency is half the round trip of a ping-pong (N buffers each way).\n"
          "The receiver checks every size: the sizes test() reports for each buffer, their sum, and the\n"
          "contents of each buffer; --json/--csv rows carry its counts (recv_*). Exit status: 0 all right,\n"
          "1 a failure or a wrong count, 2 a usage error or a setting this host or plugin cannot run.\n",
          NCCL_NET_MAX_REQUESTS, MAX_RECVS, MAX_COMMS);
}

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (end == s || v < 0) dieWith(2, "bad size '%s'", s);
  if (*end == 'k' || *end == 'K') v *= 1024;
  else if (*end == 'm' || *end == 'M') v *= 1048576;
  else if (*end == 'g' || *end == 'G') v *= 1073741824.0;
  return (size_t)v;
}


int main(int argc, char** argv) {
  int all = 0;
  const char* peer = NULL;
  size_t sweepMin = 2, sweepMax = 8388608;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV() \
  do { if (v == NULL) dieWith(2, "%s needs a value", a); i++; } while (0)
    if (!strcmp(a, "--server")) opt.server = 1;
    else if (!strcmp(a, "--client")) { NEEDV(); opt.client = v; }
    else if (!strcmp(a, "--loopback")) opt.loopback = 1;
    else if (!strcmp(a, "--plugin")) { NEEDV(); opt.plugin = v; }
    else if (!strcmp(a, "--dev")) { NEEDV(); opt.dev = atoi(v); }
    else if (!strcmp(a, "--abi")) {
      NEEDV();
      opt.abi = atoi(v);
      if (opt.abi < 8 || opt.abi > 12) dieWith(2, "--abi takes 8 ... 12, not '%s'", v);
    }
    else if (!strcmp(a, "--port")) { NEEDV(); opt.port = atoi(v); }
    else if (!strcmp(a, "--peer")) { NEEDV(); peer = v; }
    else if (!strcmp(a, "--handle-file")) { NEEDV(); opt.handleFile = v; }
    else if (!strcmp(a, "-a") || !strcmp(a, "--all")) all = 1;
    else if (!strcmp(a, "-s") || !strcmp(a, "--size")) { NEEDV(); opt.minSize = opt.maxSize = parseSize(v); }
    else if (!strcmp(a, "--min-size")) { NEEDV(); sweepMin = parseSize(v); }
    else if (!strcmp(a, "--max-size")) { NEEDV(); sweepMax = parseSize(v); }
    else if (!strcmp(a, "-n") || !strcmp(a, "--iters")) { NEEDV(); opt.iters = atoi(v); }
    else if (!strcmp(a, "--warmup")) { NEEDV(); opt.warmup = atoi(v); }
    else if (!strcmp(a, "--window")) { NEEDV(); opt.window = atoi(v); }
    else if (!strcmp(a, "--recvs")) {
      NEEDV();
      opt.recvs = atoi(v);
      if (opt.recvs < 1 || opt.recvs > MAX_RECVS) dieWith(2, "--recvs takes 1 ... %d, not '%s'", MAX_RECVS, v);
    }
    else if (!strcmp(a, "--comms")) {
      NEEDV();
      opt.comms = atoi(v);
      if (opt.comms < 1 || opt.comms > MAX_COMMS) dieWith(2, "--comms takes 1 ... %d, not '%s'", MAX_COMMS, v);
    }
    else if (!strcmp(a, "--use-cuda")) opt.cuda = 0;
    else if (!strncmp(a, "--use-cuda=", 11)) {
      char* end;
      long g = strtol(a + 11, &end, 10);
      if (end == a + 11 || *end || g < 0 || g > 1024) dieWith(2, "--use-cuda=GPU takes a GPU index, not '%s'", a + 11);
      opt.cuda = (int)g;
    }
    else if (!strcmp(a, "--bw")) opt.lat = 0;
    else if (!strcmp(a, "--lat")) opt.bw = 0;
    else if (!strcmp(a, "--json")) opt.json = 1;
    else if (!strcmp(a, "--csv")) opt.csv = 1;
    else if (!strcmp(a, "--timeout")) { NEEDV(); opt.timeoutSec = atoi(v); }
    else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) opt.verbose = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else { usage(stderr); dieWith(2, "unknown option '%s'", a); }
  }
  if (opt.iters <= 0 || opt.warmup < 0 || opt.window <= 0 || opt.timeoutSec <= 0)
    dieWith(2, "iterations, window and timeout must be positive");
  if (!opt.bw && !opt.lat) dieWith(2, "--bw and --lat exclude each other; give neither to run both");
  if (opt.window > NCCL_NET_MAX_REQUESTS) opt.window = NCCL_NET_MAX_REQUESTS;

  size_t sizes[MAX_SIZES];
  int nSizes = 0;
  if (all) {
    if (sweepMin < 1 || sweepMin > sweepMax) dieWith(2, "--min-size must be >= 1 and <= --max-size");
    for (size_t s = sweepMin; s <= sweepMax && nSizes < MAX_SIZES; s *= 2) sizes[nSizes++] = s;
  } else {
    sizes[nSizes++] = opt.minSize;
  }

  int rank = railnetLauncherRank();
  if (!opt.server && !opt.client && !opt.loopback && rank >= 0) {
    opt.port += rank / 2;
    if (rank % 2 == 0) opt.server = 1;
    else if (peer) opt.client = peer;
    else if (!opt.handleFile) dieWith(2, "rank %d is a client: give --peer HOST (its server's host) or --handle-file", rank);
    if (opt.handleFile) {
      static char path[600];
      snprintf(path, sizeof(path), "%s.%d", opt.handleFile, rank / 2);
      opt.handleFile = path;
    }
    if (rank % 2 == 1 && !opt.client) opt.client = "";
  }
  if (opt.server + (opt.client != NULL) + opt.loopback != 1) {
    usage(stderr);
    dieWith(2, "choose one of --server, --client HOST, --loopback (or run under mpirun/srun)");
  }

  if (opt.loopback && opt.cuda >= 0) {
    /* CUDA must not be initialised before fork: a child tries it, and says what is missing. */
    fflush(stdout);
    pid_t probe = fork();
    if (probe < 0) die("fork: %s", strerror(errno));
    if (probe == 0) {
      cudaSetup(opt.cuda);
      _exit(0);
    }
    int st = 0;
    waitpid(probe, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  }
  if (opt.loopback) {
    int hp[2], op[2]; /* the handle; the server's output (printed after the client's) */
    if (pipe(hp) != 0 || pipe(op) != 0) die("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid > 0) serverChild = pid;
    if (pid == 0) { /* server: hands the handle through the pipe, its table through op */
      close(hp[0]);
      close(op[0]);
      dup2(op[1], 1);
      close(op[1]);
      loadPlugin();
      NETCALL(netInit());
      char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
      void* lc = NULL;
      NETCALL(netListen(opt.dev, handle, &lc));
      if (writeAll(hp[1], handle, sizeof(handle))) die("pipe write failed");
      close(hp[1]);
      int rc = runServer(lc);
      fflush(stdout);
      _exit(rc);
    }
    close(op[1]);
    close(hp[1]);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    if (readAll(hp[0], handle, sizeof(handle))) {
      int st;
      waitpid(pid, &st, 0);
      serverChild = 0;
      die("the server process ended before it was listening");
    }
    close(hp[0]);
    if (opt.cuda >= 0) cudaSetup(opt.cuda);
    loadPlugin();
    NETCALL(netInit());
    printDevice();
    checkDevice(opt.recvs, opt.cuda >= 0);
    int rc = runClient(handle, sizes, nSizes);
    int st = 0;
    waitpid(pid, &st, 0);
    serverChild = 0;
    char buf[4096];
    ssize_t r;
    if (!opt.json)
      while ((r = read(op[0], buf, sizeof(buf))) > 0) fwrite(buf, 1, (size_t)r, stdout);
    close(op[0]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "railnet-perf: the server process failed (%s %d)\n", WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      rc = 1;
    }
    return rc;
  }

  if (opt.cuda >= 0) cudaSetup(opt.cuda);
  loadPlugin();
  NETCALL(netInit());
  printDevice();
  if (opt.client) checkDevice(opt.recvs, opt.cuda >= 0);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  if (opt.server) {
    void* lc = NULL;
    NETCALL(netListen(opt.dev, handle, &lc));
    if (opt.handleFile) writeHandleFile(opt.handleFile, handle);
    else serveHandleTcp(handle);
    return runServer(lc);
  }
  if (opt.handleFile) readHandleFile(opt.handleFile, handle);
  else fetchHandleTcp(opt.client, handle);
  return runClient(handle, sizes, nSizes);
}
