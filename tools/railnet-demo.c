/*
 * railnet-demo: load a net plugin the way NCCL does, print what it found, and move
 * data through it between a listening and a connecting comm in this process.
 *
 *   railnet-demo [--size BYTES] [--iters N] [--help] [--version]
 * The plugin is NCCL_NET_PLUGIN's library (default "railnet": libnccl-net-railnet.so,
 * found through LD_LIBRARY_PATH as NCCL finds it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <railnet_net/net.h>
#include "cli.h"
#include "launch.h"
#include "param.h"
#include "plugin_load.h"

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(call)                                                                    \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) {                                                           \
      fprintf(stderr, "railnet-demo: %s failed with result %d\n", #call, (int)r_);     \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

/* Waits for one request with a deadline; returns the size the peer reported. */
static int waitReq(ncclNet_v12_t* net, void* req, int* size, double deadline) {
  int done = 0;
  while (!done) {
    CHECK(net->test(req, &done, size));
    if (!done && nowSec() > deadline) {
      fprintf(stderr, "railnet-demo: transfer did not complete within the deadline\n");
      return 1;
    }
  }
  return 0;
}

static int moveData(ncclNet_v12_t* net, void* ctx, int dev, size_t size, int iters) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listenComm = NULL, *sendComm = NULL, *recvComm = NULL;
  ncclNetDeviceHandle_v12_t *sdev = NULL, *rdev = NULL;
  CHECK(net->listen(ctx, dev, handle, &listenComm));
  double deadline = nowSec() + 30;
  while (sendComm == NULL || recvComm == NULL) {
    if (sendComm == NULL) CHECK(net->connect(ctx, dev, handle, &sendComm, &sdev));
    if (recvComm == NULL) CHECK(net->accept(listenComm, &recvComm, &rdev));
    if (nowSec() > deadline) {
      fprintf(stderr, "railnet-demo: connection not established within 30 s\n");
      return 1;
    }
  }
  char* sbuf = malloc(size ? size : 1);
  char* rbuf = malloc(size ? size : 1);
  if (!sbuf || !rbuf) return 1;
  for (size_t i = 0; i < size; i++) sbuf[i] = (char)(i * 7 + 3);
  void *smh, *rmh;
  CHECK(net->regMr(sendComm, sbuf, size, NCCL_PTR_HOST, &smh));
  CHECK(net->regMr(recvComm, rbuf, size, NCCL_PTR_HOST, &rmh));
  double t0 = nowSec();
  for (int it = 0; it < iters; it++) {
    void *sreq = NULL, *rreq = NULL;
    void* data = rbuf;
    size_t rsize = size;
    int tag = it;
    memset(rbuf, 0, size);
    deadline = nowSec() + 30;
    while (rreq == NULL) CHECK(net->irecv(recvComm, 1, &data, &rsize, &tag, &rmh, NULL, &rreq));
    while (sreq == NULL) CHECK(net->isend(sendComm, sbuf, size, it, smh, NULL, &sreq));
    int ssize = 0, got = -1;
    if (waitReq(net, sreq, &ssize, deadline) || waitReq(net, rreq, &got, deadline)) return 1;
    if ((size_t)got != size || memcmp(sbuf, rbuf, size) != 0) {
      fprintf(stderr, "railnet-demo: data mismatch (received %d of %zu bytes)\n", got, size);
      return 1;
    }
  }
  double dt = nowSec() - t0;
  printf("moved %d x %zu bytes through %s device %d: data verified, %.1f MB/s\n", iters, size, net->name, dev,
         dt > 0 ? (double)size * iters / dt / 1e6 : 0.0);
  CHECK(net->deregMr(sendComm, smh));
  CHECK(net->deregMr(recvComm, rmh));
  CHECK(net->closeSend(sendComm));
  CHECK(net->closeRecv(recvComm));
  CHECK(net->closeListen(listenComm));
  free(sbuf);
  free(rbuf);
  return 0;
}

#define TOOL "railnet-demo"

static void usage(void) {
  printf("usage: railnet-demo [--size BYTES] [--iters N] [--help] [--version]\n"
         "Loads NCCL_NET_PLUGIN's library (default railnet -> libnccl-net-railnet.so) as NCCL\n"
         "does, lists its devices and moves data through device 0 within this process.\n"
         "\n"
         "  --size BYTES  bytes per message (default 1048576)\n"
         "  --iters N     messages (default 16)\n"
         "  -h, --help    this text\n"
         "  --version     the version (railnet-demo VERSION)\n"
         "\n"
         "NCCL_DEBUG=INFO shows the plugin's INFO lines.\n"
         "Exit status: 0 the data arrived, 1 a failure, 2 a usage error.\n");
}

/* The options into *size and *iters; returns -1 to go on, else the exit status. */
static int parseOptions(int argc, char** argv, size_t* size, int* iters) {
  enum { OPT_SIZE = 256, OPT_ITERS, OPT_VERSION };
  static const struct option longOptions[] = {
      {"size", required_argument, NULL, OPT_SIZE},
      {"iters", required_argument, NULL, OPT_ITERS},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, OPT_VERSION},
      {NULL, 0, NULL, 0},
  };
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", longOptions, NULL)) != -1) {
    switch (c) {
      case OPT_SIZE: *size = strtoull(optarg, NULL, 0); break;
      case OPT_ITERS: *iters = atoi(optarg); break;
      case 'h': usage(); return 0;
      case OPT_VERSION: return cliVersion(TOOL);
      default: return cliOptionError(TOOL, c, argv);
    }
  }
  return cliNoOperands(TOOL, argc, argv);
}

int main(int argc, char** argv) {
  size_t size = 1 << 20;
  int iters = 16;
  int rc = parseOptions(argc, argv, &size, &iters);
  if (rc >= 0) return rc;
  /* the logger NCCL would pass: INFO on stdout only with NCCL_DEBUG=INFO (or TRACE), WARN always */
  const char* dbg = railnetParamRaw("NCCL_DEBUG", NULL);
  int verbose = dbg && (strcasecmp(dbg, "INFO") == 0 || strcasecmp(dbg, "TRACE") == 0);
  pluginLog.level = verbose ? NCCL_LOG_TRACE : NCCL_LOG_WARN;
  pluginLog.infoOut = stdout;
  const char* plugin = railnetNetPluginName();
  char lib[512], err[1200];
  pluginLibName(NULL, plugin, lib, sizeof(lib));
  void* h = pluginOpen(NULL, plugin, NULL, 0, err, sizeof(err));
  if (h == NULL) {
    fprintf(stderr, "railnet-demo: cannot load %s: %s (set LD_LIBRARY_PATH to the plugin's directory)\n", lib, err);
    return 1;
  }
  ncclNet_v12_t* net = pluginFindNet(h, 12, 12, NULL);
  if (net == NULL) {
    fprintf(stderr, "railnet-demo: %s has no ncclNetPlugin_v12\n", lib);
    return 1;
  }
  printf("loaded %s (ncclNetPlugin_v12)\n", lib);
  void* ctx = NULL;
  ncclResult_t res = net->init(&ctx, 0, NULL, pluginLogger, NULL);
  if (res != ncclSuccess) {
    fprintf(stderr, "railnet-demo: init failed with result %d (see the WARN above)\n", (int)res);
    return 1;
  }
  int ndev = 0;
  CHECK(net->devices(&ndev));
  printf("network %s: %d device(s)\n", net->name, ndev);
  for (int d = 0; d < ndev; d++) {
    ncclNetProperties_v12_t p;
    memset(&p, 0, sizeof(p));
    CHECK(net->getProperties(d, &p));
    printf("  [%d] %s speed %d Mbps port %d guid 0x%llx pciPath %s ptrSupport 0x%x maxComms %d maxRecvs %d\n", d,
           p.name, p.speed, p.port, (unsigned long long)p.guid, p.pciPath ? p.pciPath : "(none)", p.ptrSupport,
           p.maxComms, p.maxRecvs);
  }
  if (ndev == 0) return 1;
  rc = moveData(net, ctx, 0, size, iters);
  if (net->finalize) net->finalize(ctx);
  return rc;
}
