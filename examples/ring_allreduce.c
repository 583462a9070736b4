/*
 * ring_allreduce: a sum all-reduce of floats over N ranks, written against railnet's
 * public API only (include/railnet.h, linked with librailnet.a) - the way a custom
 * collective library uses a railnet transport directly.
 *
 *   RAILNET_RENDEZVOUS=host:port ring_allreduce [--count N] [--transport socket|ib] [--iters K]
 *
 * Rank and size come from the launcher: OMPI_COMM_WORLD_RANK/_SIZE (mpirun), PMI_RANK/
 * PMI_SIZE, or SLURM_PROCID/SLURM_NTASKS (srun). Rank 0 serves the rendezvous at
 * host:port (plain TCP): every rank sends its listen handle, and gets back the handle of
 * its right neighbour. Each rank then runs reduce-scatter and all-gather around the ring
 * (2(N-1) steps) and checks every element against the expected sum. Exit 0 on success.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "railnet.h"

static int rank = -1, nranks = 0;

#define FAIL(...)                                      \
  do {                                                 \
    fprintf(stderr, "ring_allreduce[rank %d]: ", rank); \
    fprintf(stderr, __VA_ARGS__);                      \
    fprintf(stderr, "\n");                             \
    exit(1);                                           \
  } while (0)
#define CK(call)                                                            \
  do {                                                                      \
    ncclResult_t r_ = (call);                                               \
    if (r_ != ncclSuccess) FAIL("%s failed: %s", #call, railnetResultName(r_)); \
  } while (0)

static const char* railnetResultName(ncclResult_t r) {
  static const char* names[] = {"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
                                "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress",
                                "ncclTimeout"};
  return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "unknown";
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int envInt(const char* const* names, int* out) {
  for (; *names; names++) {
    const char* v = getenv(*names);
    if (v && *v) {
      *out = atoi(v);
      return 1;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ rendezvous */

static void fullIo(int fd, void* buf, size_t n, int isWrite) {
  char* p = buf;
  while (n > 0) {
    ssize_t k = isWrite ? write(fd, p, n) : read(fd, p, n);
    if (k <= 0) FAIL("rendezvous connection lost");
    p += k;
    n -= (size_t)k;
  }
}

static int tcpConnectOrListen(const char* spec, int listenSide) {
  char host[256];
  snprintf(host, sizeof(host), "%s", spec);
  char* colon = strrchr(host, ':');
  if (colon == NULL) FAIL("RAILNET_RENDEZVOUS=%s is not host:port", spec);
  *colon = '\0';
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
  if (getaddrinfo(host, colon + 1, &hints, &res) != 0) FAIL("cannot resolve rendezvous host %s", host);
  int fd = -1;
  double deadline = now() + 60;
  for (;;) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (listenSide) {
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 1024) != 0) FAIL("cannot listen on %s", spec);
      break;
    }
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
    close(fd);
    if (now() > deadline) FAIL("rank 0's rendezvous at %s did not answer within 60 s", spec);
    usleep(50000);
  }
  freeaddrinfo(res);
  return fd;
}

/* Every rank gives its handle; each gets back the handle of rank (r+1) % N. */
static void rendezvous(const char* spec, const char* mine, char* right) {
  if (rank == 0) {
    int lfd = tcpConnectOrListen(spec, 1);
    char* all = calloc(nranks, NCCL_NET_HANDLE_MAXSIZE);
    int* fds = calloc(nranks, sizeof(int));
    memcpy(all, mine, NCCL_NET_HANDLE_MAXSIZE);
    for (int i = 1; i < nranks; i++) {
      int fd = accept(lfd, NULL, NULL);
      int32_t r;
      fullIo(fd, &r, sizeof(r), 0);
      if (r <= 0 || r >= nranks || fds[r]) FAIL("rendezvous: bad or duplicate rank %d", r);
      fds[r] = fd;
      fullIo(fd, all + (size_t)r * NCCL_NET_HANDLE_MAXSIZE, NCCL_NET_HANDLE_MAXSIZE, 0);
    }
    for (int r = 1; r < nranks; r++) {
      fullIo(fds[r], all + (size_t)((r + 1) % nranks) * NCCL_NET_HANDLE_MAXSIZE, NCCL_NET_HANDLE_MAXSIZE, 1);
      close(fds[r]);
    }
    memcpy(right, all + (size_t)(1 % nranks) * NCCL_NET_HANDLE_MAXSIZE, NCCL_NET_HANDLE_MAXSIZE);
    close(lfd);
    free(all);
    free(fds);
  } else {
    int fd = tcpConnectOrListen(spec, 0);
    int32_t r = rank;
    fullIo(fd, &r, sizeof(r), 1);
    fullIo(fd, (void*)mine, NCCL_NET_HANDLE_MAXSIZE, 1);
    fullIo(fd, right, NCCL_NET_HANDLE_MAXSIZE, 0);
    close(fd);
  }
}

/* ------------------------------------------------------------------ the ring */

static const ncclNet_t* net;

static void waitBoth(void* sreq, void* rreq) {
  int sdone = sreq == NULL, rdone = rreq == NULL, size;
  double deadline = now() + 60;
  while (!sdone || !rdone) {
    if (!sdone) CK(net->test(sreq, &sdone, &size));
    if (!rdone) CK(net->test(rreq, &rdone, &size));
    if (now() > deadline) FAIL("a ring step did not complete within 60 s");
    if (!sdone || !rdone) sched_yield();
  }
}

/* Sends chunk sendIdx of data to the right, receives chunk recvIdx from the left into tmp. */
static void step(void* sc, void* rc, float* data, float* tmp, size_t chunk, int sendIdx, int tag) {
  void *sreq = NULL, *rreq = NULL;
  void* rbuf = tmp;
  size_t rsize = chunk * sizeof(float);
  int rtag = tag;
  while (rreq == NULL) CK(net->irecv(rc, 1, &rbuf, &rsize, &rtag, NULL, NULL, &rreq));
  while (sreq == NULL) CK(net->isend(sc, data + (size_t)sendIdx * chunk, chunk * sizeof(float), tag, NULL, NULL, &sreq));
  waitBoth(sreq, rreq);
}

int main(int argc, char** argv) {
  size_t count = 1 << 20;
  int iters = 1;
  const char* transport = "socket";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) count = strtoull(argv[++i], NULL, 0);
    else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc) transport = argv[++i];
    else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
    else {
      printf("usage: RAILNET_RENDEZVOUS=host:port %s [--count N] [--transport socket|ib] [--iters K]\n"
             "Rank/size from OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/PMI_SIZE or SLURM_PROCID/SLURM_NTASKS.\n",
             argv[0]);
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  static const char* const rankVars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
  static const char* const sizeVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL};
  if (!envInt(rankVars, &rank) || !envInt(sizeVars, &nranks) || nranks < 1 || rank < 0 || rank >= nranks)
    FAIL("no rank/size from the launcher (OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/PMI_SIZE, SLURM_PROCID/NTASKS)");
  const char* rdv = getenv("RAILNET_RENDEZVOUS");
  if (nranks > 1 && (rdv == NULL || *rdv == '\0')) FAIL("set RAILNET_RENDEZVOUS=host:port (rank 0 serves it)");
  if (count < (size_t)nranks) count = nranks;
  count -= count % nranks; /* equal chunks */
  size_t chunk = count / nranks;

  net = railnetGetNet(transport);
  if (net == NULL) FAIL("railnet has no transport '%s'", transport);
  void* ctx;
  CK(net->init(&ctx, 0, NULL, NULL, NULL));
  char mine[NCCL_NET_HANDLE_MAXSIZE], right[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *sc = NULL, *rc = NULL;
  ncclNetDeviceHandle_t* dc;
  CK(net->listen(ctx, 0, mine, &lc));
  if (nranks > 1) rendezvous(rdv, mine, right);
  else memcpy(right, mine, sizeof(right));
  double deadline = now() + 60;
  while (sc == NULL || rc == NULL) {
    if (sc == NULL) CK(net->connect(ctx, 0, right, &sc, &dc));
    if (rc == NULL) CK(net->accept(lc, &rc, &dc));
    if (now() > deadline) FAIL("ring neighbours did not connect within 60 s");
  }

  float* data = malloc(count * sizeof(float));
  float* tmp = malloc(chunk * sizeof(float));
  if (!data || !tmp) FAIL("out of memory");
  double t0 = 0;
  long bad = 0;
  for (int it = 0; it < iters; it++) {
    /* element i of rank r is r + 1 + (i % 7): the sum over ranks is N(N+1)/2 + N(i % 7) */
    for (size_t i = 0; i < count; i++) data[i] = (float)(rank + 1 + (int)(i % 7));
    if (it == 0) t0 = now();
    for (int s = 0; s < nranks - 1; s++) { /* reduce-scatter */
      int sendIdx = ((rank - s) % nranks + nranks) % nranks;
      int recvIdx = ((rank - s - 1) % nranks + nranks) % nranks;
      step(sc, rc, data, tmp, chunk, sendIdx, s);
      float* dst = data + (size_t)recvIdx * chunk;
      for (size_t i = 0; i < chunk; i++) dst[i] += tmp[i];
    }
    for (int s = 0; s < nranks - 1; s++) { /* all-gather */
      int sendIdx = ((rank + 1 - s) % nranks + nranks) % nranks;
      int recvIdx = ((rank - s) % nranks + nranks) % nranks;
      step(sc, rc, data, tmp, chunk, sendIdx, nranks + s);
      memcpy(data + (size_t)recvIdx * chunk, tmp, chunk * sizeof(float));
    }
    for (size_t i = 0; i < count; i++) {
      float want = (float)(nranks * (nranks + 1) / 2 + nranks * (int)(i % 7));
      if (data[i] != want) {
        if (bad++ < 3) fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", rank, i, data[i], want);
      }
    }
  }
  double secs = now() - t0;
  CK(net->closeSend(sc));
  CK(net->closeRecv(rc));
  CK(net->closeListen(lc));
  if (net->finalize) net->finalize(ctx);
  free(data);
  free(tmp);
  if (bad) FAIL("%ld wrong elements", bad);
  printf("rank %d/%d: all-reduce of %zu floats over %s verified (%d iteration%s, %.3f s, %.1f MB/s algbw)\n", rank,
         nranks, count, net->name, iters, iters == 1 ? "" : "s", secs, count * 4.0 * iters / secs / 1e6);
  return 0;
}
