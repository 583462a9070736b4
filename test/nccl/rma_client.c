/*
 * A client of railnet's RMA plugin built on NCCL 2.30.7's own headers only (plugin/rma/rma_v14.h,
 * plugin/rma/rma_v13.h, and the standalone net headers of NCCL's plugins/net/example), not
 * railnet's: it dlopens the net plugin as NCCL does and looks up ncclRmaPlugin_v14 or _v13.
 *
 *   rma_nccl_client PLUGIN.so 14|13 run      two forked ranks on devices 0 and 1 (or 0 and 0):
 *        group, context, symmetric windows of host memory, a put with signal (the peer waits on
 *        the signal word, then checks every byte), a get (every byte checked), a flush, teardown
 *   rma_nccl_client PLUGIN.so 14|13 refused  init must fail (no GPUDirect RDMA, RAILNET_RMA_PLUGIN=0)
 *
 * Prints one line per rank, "rank R: ncclRmaPlugin_vV: ok" or what failed; exit 0 when all is as
 * expected. Built only when NCCL's sources are given (make test-build NCCL_SRC=DIR).
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "rma/rma_v13.h"
#include "rma/rma_v14.h"

#define PART (256 * 1024)

struct shared {
  char handles[2][NCCL_NET_HANDLE_MAXSIZE];
  atomic_int arrived;
};

/* The version-independent view of the table: v13's calls adapted to v14's shape. */
struct rma {
  int version;
  const ncclRma_v14_t* v14;
  const ncclRma_v13_t* v13;
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int barrier(struct shared* sh, int* round) {
  int target = 2 * ++*round;
  atomic_fetch_add(&sh->arrived, 1);
  for (double end = now() + 60; atomic_load(&sh->arrived) < target;)
    if (now() > end) return -1;
    else usleep(1000);
  return 0;
}

#define T(x) (r->version == 14 ? r->v14->x : r->v13->x)

static ncclResult_t createContext(struct rma* r, void* coll, void** ctx) {
  if (r->version == 14) {
    ncclRmaConfig_v14_t c = {1, NCCL_NET_TRAFFIC_CLASS_UNDEF, 1};
    return r->v14->createContext(coll, &c, ctx);
  }
  ncclGinConfig_v13_t c = {0, 0, 1, 0, NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ncclNetDeviceHandle_v11_t* dev = (ncclNetDeviceHandle_v11_t*)&c;
  ncclResult_t res = r->v13->createContext(coll, &c, ctx, &dev);
  return res == ncclSuccess && dev != NULL ? ncclInternalError : res; /* a proxy: no device handle */
}

static ncclResult_t regMr(struct rma* r, void* coll, void* p, size_t n, void** mh) {
  void* gin = NULL;
  return r->version == 14 ? r->v14->regMrSym(coll, p, n, NCCL_PTR_HOST, 0, mh)
                          : r->v13->regMrSym(coll, p, n, NCCL_PTR_HOST, 0, mh, &gin);
}

static ncclResult_t putSignal(struct rma* r, void* ctx, void* dmh, int to, void* smh, uint64_t sigOff, void** req) {
  return r->version == 14
             ? r->v14->iputSignal(ctx, 0, 0, dmh, PART, PART, dmh, to, sigOff, smh, 7, NCCL_GIN_SIGNAL_OP_ADD, true, req)
             : r->v13->iputSignal(ctx, 0, 0, dmh, PART, PART, dmh, to, sigOff, smh, 7, NCCL_GIN_SIGNAL_OP_ADD, req);
}

static const char* waitFor(struct rma* r, void* coll, void* ctx, void* req) {
  int done = 0;
  for (double end = now() + 60; !done; ) {
    if (T(test)(coll, req, &done) != ncclSuccess) return "test() failed";
    if (!done && (r->version == 14 ? r->v14->rmaProgress(ctx) : r->v13->ginProgress(ctx)) != ncclSuccess)
      return "progress failed";
    if (now() > end) return "a request did not complete in 60 s";
  }
  return NULL;
}

static unsigned char pattern(int rank, size_t i) { return (unsigned char)(rank * 29 + i * 13 + (i >> 9)); }

static const char* rank(struct rma* r, struct shared* sh, int me) {
  void *ctx = NULL, *lc = NULL, *coll = NULL, *rctx = NULL, *dmh = NULL, *smh = NULL, *req = NULL;
  int ndev = 0, round = 0, peer = 1 - me;
  if (T(init)(&ctx, 0x5eed, NULL) != ncclSuccess) return "init failed";
  if (T(devices)(&ndev) != ncclSuccess || ndev < 1) return "no device";
  ncclNetProperties_v12_t props;
  if (T(getProperties)(me % ndev, &props) != ncclSuccess) return "getProperties failed";
  if (props.netDeviceType != NCCL_NET_DEVICE_GIN_PROXY) return "not a GIN proxy device";
  if (T(listen)(ctx, me % ndev, sh->handles[me], &lc) != ncclSuccess) return "listen failed";
  if (barrier(sh, &round)) return "barrier";
  void* handles[2] = {sh->handles[0], sh->handles[1]};
  if (T(connect)(ctx, handles, 2, me, lc, &coll) != ncclSuccess) return "connect failed";
  if (createContext(r, coll, &rctx) != ncclSuccess) return "createContext failed";
  unsigned char* data = mmap(NULL, 3 * PART, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  volatile uint64_t* sig = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED || sig == MAP_FAILED) return "mmap failed";
  for (size_t i = 0; i < PART; i++) data[i] = pattern(me, i);
  if (regMr(r, coll, data, 3 * PART, &dmh) != ncclSuccess) return "regMrSym failed";
  if (regMr(r, coll, (void*)sig, 16, &smh) != ncclSuccess) return "regMrSym of the signals failed";
  if (putSignal(r, rctx, dmh, peer, smh, 8 * me, &req) != ncclSuccess || req == NULL) return "iputSignal failed";
  const char* e = waitFor(r, coll, rctx, req);
  if (e) return e;
  for (double end = now() + 60; __atomic_load_n(&sig[peer], __ATOMIC_ACQUIRE) < 7 && now() < end;) usleep(100);
  if (sig[peer] != 7) return "the peer's signal did not come";
  for (size_t i = 0; i < PART; i++)
    if (data[PART + i] != pattern(peer, i)) return "a byte of the peer's put differs after its signal";
  if (T(iget)(rctx, 0, 0, dmh, PART, 2 * PART, dmh, peer, &req) != ncclSuccess || req == NULL) return "iget failed";
  if ((e = waitFor(r, coll, rctx, req)) != NULL) return e;
  for (size_t i = 0; i < PART; i++)
    if (data[2 * PART + i] != pattern(peer, i)) return "a byte of the get differs";
  req = NULL;
  if (T(iflush)(rctx, 0, dmh, peer, &req) != ncclSuccess) return "iflush failed";
  if (req != NULL && (e = waitFor(r, coll, rctx, req)) != NULL) return e;
  bool err = true;
  if (T(queryLastError)(rctx, &err) != ncclSuccess || err) return "queryLastError reports an error";
  if (barrier(sh, &round)) return "barrier"; /* nobody deregisters what the other still reads */
  if (T(deregMrSym)(coll, dmh) != ncclSuccess || T(deregMrSym)(coll, smh) != ncclSuccess) return "deregMrSym failed";
  if (T(destroyContext)(rctx) != ncclSuccess) return "destroyContext failed";
  if (T(closeColl)(coll) != ncclSuccess || T(closeListen)(lc) != ncclSuccess) return "close failed";
  if (T(finalize)(ctx) != ncclSuccess) return "finalize failed";
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 4 || (strcmp(argv[2], "14") && strcmp(argv[2], "13")) ||
      (strcmp(argv[3], "run") && strcmp(argv[3], "refused"))) {
    fprintf(stderr, "usage: %s PLUGIN.so 14|13 run|refused\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("cannot open %s: %s\n", argv[1], dlerror());
    return 1;
  }
  struct rma r = {atoi(argv[2]), dlsym(lib, "ncclRmaPlugin_v14"), dlsym(lib, "ncclRmaPlugin_v13")};
  if ((r.version == 14 && r.v14 == NULL) || (r.version == 13 && r.v13 == NULL)) {
    printf("%s has no ncclRmaPlugin_v%d\n", argv[1], r.version);
    return 1;
  }
  if (strcmp(argv[3], "refused") == 0) {
    void* ctx = NULL;
    ncclResult_t res = r.version == 14 ? r.v14->init(&ctx, 1, NULL) : r.v13->init(&ctx, 1, NULL);
    printf("ncclRmaPlugin_v%d: init %s (%d)\n", r.version, res == ncclSuccess ? "succeeded" : "refused", res);
    return res == ncclSuccess;
  }
  struct shared* sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  memset(sh, 0, sizeof(*sh));
  pid_t pids[2];
  for (int me = 0; me < 2; me++) {
    if ((pids[me] = fork()) == 0) {
      const char* e = rank(&r, sh, me);
      printf("rank %d: ncclRmaPlugin_v%d: %s\n", me, r.version, e ? e : "ok");
      fflush(stdout);
      _exit(e != NULL);
    }
  }
  int bad = 0;
  for (int me = 0; me < 2; me++) {
    int st = 0;
    waitpid(pids[me], &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  return bad;
}
