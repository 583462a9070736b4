/*
 * railnet-perf: bandwidth and latency through the ncclNet API of any net plugin, in the
 * spirit of perftest's ib_write_bw / ib_write_lat (same columns).
 *
 *   railnet-perf --server [--port P | --handle-file F]          # receiver
 *   railnet-perf --client HOST [--port P] | --handle-file F      # sender, prints the tables
 *   railnet-perf --loopback                                      # both ends, two processes here
 *
 * The client drives: it sends its settings (sizes, iterations, tests) as the first message,
 * so the server needs only --plugin/--dev. Data goes client -> server; a second comm
 * server -> client carries acks (bandwidth) and the pong of the latency test.
 * Run with --help for every option.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <railnet_net/net.h>

#define PERF_MAGIC 0x7261696c70657266ULL /* "railperf" */
#define MAX_SIZES 64
#define CTRL_SIZE 1024

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
  int abi; /* 0: newest the plugin exports */
} opt = {NULL, 0, 0, 0, NULL, 18515, NULL, 65536, 65536, 1000, 20, 16, 1, 1, 0, 0, 60, 0, 0};

/* What the client tells the server (first message over the data comm). */
typedef struct {
  uint64_t magic;
  int32_t nSizes, iters, warmup, window, bw, lat;
  uint64_t sizes[MAX_SIZES];
  char handle[NCCL_NET_HANDLE_MAXSIZE]; /* the client's listen handle, for the reverse comm */
} perfConfig;
_Static_assert(sizeof(perfConfig) <= CTRL_SIZE, "config fits the control message");

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "railnet-perf: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

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
  const char* name = opt.plugin ? opt.plugin : getenv("NCCL_NET_PLUGIN");
  if (name == NULL || name[0] == '\0') name = "railnet";
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
/* name and speed (Mb/s) of a device. */
static ncclResult_t netProps(int dev, const char** name, int* speed) {
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
    *speed = p.v8.speed;
  } else if (net.version <= 10) {
    r = V9->getProperties(dev, &p.v9);
    *speed = p.v9.speed;
  } else {
    r = V12->getProperties(dev, (ncclNetProperties_v12_t*)&p);
    *speed = net.version == 11 ? p.v11.speed : p.v12.speed;
  }
  *name = p.v8.name;
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
static ncclResult_t netRegMr(void* comm, void* data, size_t size, void** mh) {
  return V8->regMr(comm, data, size, NCCL_PTR_HOST, mh);
}
static ncclResult_t netDeregMr(void* comm, void* mh) { return V8->deregMr(comm, mh); }
static ncclResult_t netIsend(void* sc, void* data, size_t size, void* mh, void** req) {
  switch (net.version) {
    case 8: return V8->isend(sc, data, (int)size, 0, mh, req);
    case 9: return V9->isend(sc, data, size, 0, mh, req);
    case 10: return V10->isend(sc, data, size, 0, mh, NULL, req);
    default: return V12->isend(sc, data, size, 0, mh, NULL, req);
  }
}
static ncclResult_t netIrecv(void* rc, void* data, size_t size, void* mh, void** req) {
  int tag = 0;
  void* phandle = NULL;
  switch (net.version) {
    case 8: {
      int s = (int)size;
      return V8->irecv(rc, 1, &data, &s, &tag, &mh, req);
    }
    case 9: return V9->irecv(rc, 1, &data, &size, &tag, &mh, req);
    case 10: return V10->irecv(rc, 1, &data, &size, &tag, &mh, &phandle, req);
    default: return V12->irecv(rc, 1, &data, &size, &tag, &mh, &phandle, req);
  }
}
static ncclResult_t netTest(void* req, int* done, int* size) { return V8->test(req, done, size); }
static void netClose(void* sc, void* rc, void* lc) {
  if (sc) V8->closeSend(sc);
  if (rc) V8->closeRecv(rc);
  if (lc) V8->closeListen(lc);
  if (net.version >= 11 && net.ctx && V12->finalize) V12->finalize(net.ctx);
}

/* ================================================================ transfers */

typedef struct {
  void *sendComm, *recvComm, *listenComm;
  char *sbuf, *rbuf;
  void *smh, *rmh;
  size_t bufSize;
  double deadline;
} ends;

/* Not done yet: give the transport's threads the core (this tool often shares few cores with them). */
static void checkDeadline(const ends* e, const char* what) {
  sched_yield();
  if (nowSec() > e->deadline)
    die("%s did not complete within %d s (peer gone? see --timeout)", what, opt.timeoutSec);
}

/* Post until the transport takes the request (a NULL request means "not now"). */
static void* postSend(ends* e, void* data, size_t size, void* mh) {
  void* req = NULL;
  while (req == NULL) {
    NETCALL(netIsend(e->sendComm, data, size, mh, &req));
    if (req == NULL) checkDeadline(e, "isend");
  }
  return req;
}
static void* postRecv(ends* e, void* data, size_t size, void* mh) {
  void* req = NULL;
  while (req == NULL) {
    NETCALL(netIrecv(e->recvComm, data, size, mh, &req));
    if (req == NULL) checkDeadline(e, "irecv");
  }
  return req;
}
static int waitReq(ends* e, void* req) {
  int done = 0, size = -1;
  while (!done) {
    NETCALL(netTest(req, &done, &size));
    if (!done) checkDeadline(e, "a transfer");
  }
  return size;
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

/* n messages of size bytes, at most window in flight; sizes received are summed in *bytes.
 * When stamps is not NULL, stamps[i] is when message i completed. */
static void stream(ends* e, int isSend, size_t size, int n, int window, long long* bytes, double* stamps) {
  void* reqs[NCCL_NET_MAX_REQUESTS];
  int head = 0, tail = 0; /* posted [tail, head) */
  if (window > NCCL_NET_MAX_REQUESTS) window = NCCL_NET_MAX_REQUESTS;
  while (tail < n) {
    while (head < n && head - tail < window) {
      reqs[head % window] = isSend ? postSend(e, e->sbuf, size, e->smh) : postRecv(e, e->rbuf, size, e->rmh);
      head++;
    }
    int done = 0, got = -1;
    NETCALL(netTest(reqs[tail % window], &done, &got));
    if (!done) {
      checkDeadline(e, isSend ? "isend" : "irecv");
      continue;
    }
    if (bytes) *bytes += got;
    if (stamps) stamps[tail] = nowSec();
    tail++;
    if ((tail & 63) == 0) progress(isSend ? "bw" : "recv", size, tail, n);
  }
}

/* The small messages both sides use to stay in step. */
static void sendAck(ends* e) { waitReq(e, postSend(e, e->sbuf, 4, e->smh)); }
static void recvAck(ends* e) { waitReq(e, postRecv(e, e->rbuf, 4, e->rmh)); }

/* ================================================================ reporting */

static const char* line = "---------------------------------------------------------------------------------------";

static void bwHeader(void) {
  if (opt.json || opt.csv) {
    if (opt.csv) printf("test,bytes,iterations,bw_peak_MBps,bw_avg_MBps,msg_rate_Mpps\n");
    return;
  }
  printf("%s\n %-10s %-13s %-18s %-20s %s\n", line, "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]",
         "MsgRate[Mpps]");
}
static int jsonRows;
static void bwRow(size_t size, int iters, double peak, double avg, double mpps) {
  if (opt.csv) printf("bw,%zu,%d,%.2f,%.2f,%.6f\n", size, iters, peak, avg, mpps);
  else if (opt.json)
    printf("%s{\"test\":\"bw\",\"bytes\":%zu,\"iterations\":%d,\"bw_peak_MBps\":%.2f,\"bw_avg_MBps\":%.2f,"
           "\"msg_rate_Mpps\":%.6f}",
           jsonRows++ ? ",\n " : "", size, iters, peak, avg, mpps);
  else printf(" %-10zu %-13d %-18.2f %-20.2f %.6f\n", size, iters, peak, avg, mpps);
  fflush(stdout);
}
static void latHeader(void) {
  if (opt.json || opt.csv) {
    if (opt.csv) printf("test,bytes,iterations,t_min_us,t_max_us,t_typical_us,t_avg_us,t_stdev_us,t_99_us\n");
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
static void latRow(size_t size, int iters, double* t) {
  qsort(t, (size_t)iters, sizeof(double), cmpDouble);
  double sum = 0, sq = 0;
  for (int i = 0; i < iters; i++) sum += t[i];
  double avg = sum / iters;
  for (int i = 0; i < iters; i++) sq += (t[i] - avg) * (t[i] - avg);
  double sd = squareRoot(sq / iters), p99 = t[(int)((iters - 1) * 0.99)];
  if (opt.csv) printf("lat,%zu,%d,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n", size, iters, t[0], t[iters - 1], t[iters / 2], avg, sd, p99);
  else if (opt.json)
    printf("%s{\"test\":\"lat\",\"bytes\":%zu,\"iterations\":%d,\"t_min_us\":%.2f,\"t_max_us\":%.2f,"
           "\"t_typical_us\":%.2f,\"t_avg_us\":%.2f,\"t_stdev_us\":%.2f,\"t_99_us\":%.2f}",
           jsonRows++ ? ",\n " : "", size, iters, t[0], t[iters - 1], t[iters / 2], avg, sd, p99);
  else
    printf(" %-10zu %-12d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %.2f\n", size, iters, t[0], t[iters - 1], t[iters / 2],
           avg, sd, p99);
  fflush(stdout);
}

/* ================================================================ the two roles */

static void setupBuffers(ends* e, size_t maxSize) {
  e->bufSize = maxSize < CTRL_SIZE ? CTRL_SIZE : maxSize;
  if (posix_memalign((void**)&e->sbuf, 4096, e->bufSize) || posix_memalign((void**)&e->rbuf, 4096, e->bufSize))
    die("cannot allocate 2 x %zu bytes", e->bufSize);
  for (size_t i = 0; i < e->bufSize; i++) e->sbuf[i] = (char)(i * 7 + 1);
  memset(e->rbuf, 0, e->bufSize);
  NETCALL(netRegMr(e->sendComm, e->sbuf, e->bufSize, &e->smh));
  NETCALL(netRegMr(e->recvComm, e->rbuf, e->bufSize, &e->rmh));
}

static void printDevice(void) {
  int ndev = 0, speed = 0;
  const char* dname = NULL;
  NETCALL(netDevices(&ndev));
  if (opt.dev < 0 || opt.dev >= ndev) die("%s has %d device(s); --dev %d does not exist", net.name, ndev, opt.dev);
  NETCALL(netProps(opt.dev, &dname, &speed));
  if (opt.json || opt.csv) return;
  printf("%s\n railnet-perf: %s through %s (ncclNet v%d)\n Device: [%d] %s, %d Mb/s (%d device(s))\n", line, net.name,
         net.path, net.version, opt.dev, dname ? dname : "?", speed, ndev);
}

/* Server: receives the sweep the client asked for, acks each size, answers pings. */
static int runServer(const char* handle, void* listenComm) {
  ends e = {0};
  e.listenComm = listenComm;
  e.deadline = nowSec() + opt.timeoutSec;
  while (e.recvComm == NULL) {
    NETCALL(netAccept(e.listenComm, &e.recvComm));
    if (e.recvComm == NULL) checkDeadline(&e, "accept");
  }
  (void)handle;
  static char ctrl[CTRL_SIZE];
  void* cmh;
  NETCALL(netRegMr(e.recvComm, ctrl, sizeof(ctrl), &cmh));
  void* req = postRecv(&e, ctrl, sizeof(ctrl), cmh);
  waitReq(&e, req);
  NETCALL(netDeregMr(e.recvComm, cmh));
  perfConfig cfg;
  memcpy(&cfg, ctrl, sizeof(cfg));
  if (cfg.magic != PERF_MAGIC || cfg.nSizes <= 0 || cfg.nSizes > MAX_SIZES) die("the client sent no valid settings");
  while (e.sendComm == NULL) {
    NETCALL(netConnect(opt.dev, cfg.handle, &e.sendComm));
    if (e.sendComm == NULL) checkDeadline(&e, "connect back to the client");
  }
  size_t maxSize = 0;
  for (int i = 0; i < cfg.nSizes; i++) maxSize = cfg.sizes[i] > maxSize ? cfg.sizes[i] : maxSize;
  setupBuffers(&e, maxSize);
  sendAck(&e); /* both comms are up */
  if (!opt.json && !opt.csv) printf("%s\n receiver: %-10s %-12s %-16s %s\n", line, "#bytes", "#messages", "bytes received", "check");
  int bad = 0;
  for (int t = 0; t < 2; t++) {
    if ((t == 0 && !cfg.bw) || (t == 1 && !cfg.lat)) continue;
    for (int i = 0; i < cfg.nSizes; i++) {
      size_t size = cfg.sizes[i];
      long long bytes = 0;
      e.deadline = nowSec() + opt.timeoutSec;
      int n = cfg.warmup + cfg.iters;
      if (t == 0) {
        stream(&e, 0, size, cfg.warmup, cfg.window, &bytes, NULL);
        sendAck(&e);
        stream(&e, 0, size, cfg.iters, cfg.window, &bytes, NULL);
        sendAck(&e);
      } else {
        for (int k = 0; k < n; k++) {
          bytes += waitReq(&e, postRecv(&e, e.rbuf, size, e.rmh));
          waitReq(&e, postSend(&e, e.sbuf, size, e.smh));
        }
      }
      int ok = bytes == (long long)size * n && (size == 0 || (e.rbuf[size - 1] == (char)((size - 1) * 7 + 1) &&
                                                             e.rbuf[0] == (char)1));
      bad += !ok;
      if (!opt.json && !opt.csv)
        printf(" receiver: %-10zu %-12d %-16lld %s (%s)\n", size, n, bytes, ok ? "ok" : "WRONG", t ? "lat" : "bw");
      else if (opt.csv)
        printf("recv_%s,%zu,%d,%lld,%s\n", t ? "lat" : "bw", size, n, bytes, ok ? "ok" : "wrong");
    }
  }
  recvAck(&e); /* the client is done */
  NETCALL(netDeregMr(e.sendComm, e.smh));
  NETCALL(netDeregMr(e.recvComm, e.rmh));
  netClose(e.sendComm, e.recvComm, e.listenComm);
  free(e.sbuf);
  free(e.rbuf);
  if (bad) fprintf(stderr, "railnet-perf: %d size(s) arrived with wrong byte counts or contents\n", bad);
  return bad ? 1 : 0;
}

static int runClient(char* handle, const size_t* sizes, int nSizes) {
  ends e = {0};
  e.deadline = nowSec() + opt.timeoutSec;
  perfConfig cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.magic = PERF_MAGIC;
  cfg.nSizes = nSizes;
  cfg.iters = opt.iters;
  cfg.warmup = opt.warmup;
  cfg.window = opt.window;
  cfg.bw = opt.bw;
  cfg.lat = opt.lat;
  for (int i = 0; i < nSizes; i++) cfg.sizes[i] = sizes[i];
  NETCALL(netListen(opt.dev, cfg.handle, &e.listenComm));
  while (e.sendComm == NULL) {
    NETCALL(netConnect(opt.dev, handle, &e.sendComm));
    if (e.sendComm == NULL) checkDeadline(&e, "connect to the server");
  }
  static char ctrl[CTRL_SIZE];
  memcpy(ctrl, &cfg, sizeof(cfg));
  void* cmh;
  NETCALL(netRegMr(e.sendComm, ctrl, sizeof(ctrl), &cmh));
  waitReq(&e, postSend(&e, ctrl, sizeof(ctrl), cmh));
  NETCALL(netDeregMr(e.sendComm, cmh));
  while (e.recvComm == NULL) {
    NETCALL(netAccept(e.listenComm, &e.recvComm));
    if (e.recvComm == NULL) checkDeadline(&e, "accept the server's connection");
  }
  setupBuffers(&e, sizes[nSizes - 1]);
  recvAck(&e);
  if (opt.json) printf("{\"plugin\":\"%s\",\"net\":\"%s\",\"abi\":%d,\"dev\":%d,\"results\":[", net.path, net.name,
                       net.version, opt.dev);
  double* stamps = malloc(sizeof(double) * (size_t)(opt.iters + opt.warmup));
  if (stamps == NULL) die("out of memory");
  if (opt.bw) {
    bwHeader();
    for (int i = 0; i < nSizes; i++) {
      e.deadline = nowSec() + opt.timeoutSec;
      progress("bw", sizes[i], 0, opt.iters);
      stream(&e, 1, sizes[i], opt.warmup, opt.window, NULL, NULL);
      recvAck(&e);
      double t0 = nowSec();
      stream(&e, 1, sizes[i], opt.iters, opt.window, NULL, stamps);
      recvAck(&e);
      double t = nowSec() - t0;
      /* Peak: the fastest stretch of max(window, iters/8) consecutive sender completions. */
      int w = opt.iters / 8 > opt.window ? opt.iters / 8 : opt.window;
      if (w > opt.iters - 1) w = opt.iters - 1;
      double best = t;
      for (int k = w; w > 0 && k < opt.iters; k++)
        if (stamps[k] > stamps[k - w] && (stamps[k] - stamps[k - w]) * opt.iters / w < best)
          best = (stamps[k] - stamps[k - w]) * opt.iters / w;
      progressEnd();
      double mb = (double)sizes[i] * opt.iters / 1048576.0;
      bwRow(sizes[i], opt.iters, mb / best, mb / t, opt.iters / t / 1e6);
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
        void* rreq = postRecv(&e, e.rbuf, sizes[i], e.rmh);
        waitReq(&e, postSend(&e, e.sbuf, sizes[i], e.smh));
        waitReq(&e, rreq);
        if (k >= opt.warmup) stamps[k - opt.warmup] = (nowSec() - t0) * 1e6 / 2;
      }
      progressEnd();
      latRow(sizes[i], opt.iters, stamps);
    }
  }
  if (opt.json) printf("]}\n");
  else if (!opt.csv) printf("%s\n", line);
  fflush(stdout);
  sendAck(&e);
  free(stamps);
  NETCALL(netDeregMr(e.sendComm, e.smh));
  NETCALL(netDeregMr(e.recvComm, e.rmh));
  netClose(e.sendComm, e.recvComm, e.listenComm);
  free(e.sbuf);
  free(e.rbuf);
  return 0;
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

/* ================================================================ main */

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
          "  --window N          messages in flight in the bandwidth test (default 16, max %d)\n"
          "  --bw | --lat        run only the bandwidth or only the latency test (default both)\n"
          "  --json | --csv      machine-readable results\n"
          "  --timeout S         give up when connecting, or one size of the sweep, takes longer than\n"
          "                      S seconds (default 60); on a terminal, sizes that run longer than 2 s\n"
          "                      show a progress line on stderr\n"
          "  -v, --verbose       the plugin's INFO lines on stderr\n"
          "  -h, --help          this text\n"
          "\n"
          "The client sends its settings to the server, so the server needs only --plugin/--dev/--port.\n"
          "Without --server/--client/--loopback, the rank from OMPI_COMM_WORLD_RANK, PMI_RANK or\n"
          "SLURM_PROCID picks the role: even ranks serve, odd ranks are clients of rank-1; pair k\n"
          "(ranks 2k, 2k+1) uses port P+k, or the file F.k with --handle-file F; clients need --peer\n"
          "or --handle-file. BW in MB/sec is 2^20 bytes per second (as perftest); latency is half the\n"
          "round trip of a ping-pong.\n",
          NCCL_NET_MAX_REQUESTS);
}

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (end == s || v < 0) die("bad size '%s'", s);
  if (*end == 'k' || *end == 'K') v *= 1024;
  else if (*end == 'm' || *end == 'M') v *= 1048576;
  else if (*end == 'g' || *end == 'G') v *= 1073741824.0;
  return (size_t)v;
}

static int envRank(void) {
  static const char* vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (int i = 0; i < 3; i++) {
    const char* v = getenv(vars[i]);
    if (v && *v) return atoi(v);
  }
  return -1;
}

int main(int argc, char** argv) {
  int all = 0;
  const char* peer = NULL;
  size_t sweepMin = 2, sweepMax = 8388608;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV() \
  do { if (v == NULL) die("%s needs a value", a); i++; } while (0)
    if (!strcmp(a, "--server")) opt.server = 1;
    else if (!strcmp(a, "--client")) { NEEDV(); opt.client = v; }
    else if (!strcmp(a, "--loopback")) opt.loopback = 1;
    else if (!strcmp(a, "--plugin")) { NEEDV(); opt.plugin = v; }
    else if (!strcmp(a, "--dev")) { NEEDV(); opt.dev = atoi(v); }
    else if (!strcmp(a, "--abi")) {
      NEEDV();
      opt.abi = atoi(v);
      if (opt.abi < 8 || opt.abi > 12) die("--abi takes 8 ... 12, not '%s'", v);
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
    else if (!strcmp(a, "--bw")) opt.lat = 0;
    else if (!strcmp(a, "--lat")) opt.bw = 0;
    else if (!strcmp(a, "--json")) opt.json = 1;
    else if (!strcmp(a, "--csv")) opt.csv = 1;
    else if (!strcmp(a, "--timeout")) { NEEDV(); opt.timeoutSec = atoi(v); }
    else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) opt.verbose = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else { usage(stderr); die("unknown option '%s'", a); }
  }
  if (opt.iters <= 0 || opt.warmup < 0 || opt.window <= 0 || opt.timeoutSec <= 0) die("iterations, window and timeout must be positive");
  if (!opt.bw && !opt.lat) die("--bw and --lat exclude each other; give neither to run both");
  if (opt.window > NCCL_NET_MAX_REQUESTS) opt.window = NCCL_NET_MAX_REQUESTS;

  size_t sizes[MAX_SIZES];
  int nSizes = 0;
  if (all) {
    if (sweepMin < 1 || sweepMin > sweepMax) die("--min-size must be >= 1 and <= --max-size");
    for (size_t s = sweepMin; s <= sweepMax && nSizes < MAX_SIZES; s *= 2) sizes[nSizes++] = s;
  } else {
    sizes[nSizes++] = opt.minSize;
  }

  int rank = envRank();
  if (!opt.server && !opt.client && !opt.loopback && rank >= 0) {
    opt.port += rank / 2;
    if (rank % 2 == 0) opt.server = 1;
    else if (peer) opt.client = peer;
    else if (!opt.handleFile) die("rank %d is a client: give --peer HOST (its server's host) or --handle-file", rank);
    if (opt.handleFile) {
      static char path[600];
      snprintf(path, sizeof(path), "%s.%d", opt.handleFile, rank / 2);
      opt.handleFile = path;
    }
    if (rank % 2 == 1 && !opt.client) opt.client = "";
  }
  if (opt.server + (opt.client != NULL) + opt.loopback != 1) {
    usage(stderr);
    die("choose one of --server, --client HOST, --loopback (or run under mpirun/srun)");
  }

  if (opt.loopback) {
    int hp[2], op[2]; /* the handle; the server's output (printed after the client's) */
    if (pipe(hp) != 0 || pipe(op) != 0) die("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
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
      int rc = runServer(handle, lc);
      fflush(stdout);
      _exit(rc);
    }
    close(op[1]);
    close(hp[1]);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    if (readAll(hp[0], handle, sizeof(handle))) {
      int st;
      waitpid(pid, &st, 0);
      die("the server process ended before it was listening");
    }
    close(hp[0]);
    loadPlugin();
    NETCALL(netInit());
    printDevice();
    int rc = runClient(handle, sizes, nSizes);
    int st = 0;
    waitpid(pid, &st, 0);
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

  loadPlugin();
  NETCALL(netInit());
  printDevice();
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  if (opt.server) {
    void* lc = NULL;
    NETCALL(netListen(opt.dev, handle, &lc));
    if (opt.handleFile) writeHandleFile(opt.handleFile, handle);
    else serveHandleTcp(handle);
    return runServer(handle, lc);
  }
  if (opt.handleFile) readHandleFile(opt.handleFile, handle);
  else fetchHandleTcp(opt.client, handle);
  return runClient(handle, sizes, nSizes);
}
