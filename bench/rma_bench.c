/*
 * rma_bench: railnet's one-sided RMA (railnetGetRma(), include/railnet.h) between two ranks,
 * forked here, rank r on RMA device r (rxe0 -> rxe1 on soft-RoCE), each pinned to vCPU r as
 * perftest's ends are in bench/softroce-perftest.sh. bench/rma.sh runs it in the VM after
 * perftest and prints the ratios.
 *
 *   rma_bench [--sizes "S ..."] [--mib M] [--lat-iters N]
 *
 * Prints tab-separated rows:
 *   rma_put_bw         SIZE  ITERS  MBps    rank 0 puts into rank 1's window
 *   rma_get_bw         SIZE  ITERS  MBps    rank 0 gets from rank 1's window
 *   rma_putsignal_rtt  8     ITERS  T_TYPICAL_us  T_AVG_us
 *                                           a put of 8 B with a signal to the peer, which waits
 *                                           on the signal word and answers the same way
 * Bandwidth: M MiB per size (default 32) as M MiB / size operations (8 .. 1000), at most
 * 4 MiB in flight (2 .. 128 operations), as the perftest runs beside it; a tenth as warmup.
 * MB/s are 10^6 bytes per second, as perftest's.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "railnet.h"

#define MAX_SIZES 16
#define MAX_ITERS 1000

struct shared {
  char handles[2][NCCL_NET_HANDLE_MAXSIZE];
  atomic_int arrived;
};

static struct {
  size_t sizes[MAX_SIZES];
  int nsizes;
  long mib, latIters;
} opt = {{65536, 1 << 20, 8 << 20}, 3, 32, 200};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(int rank, const char* what) {
  fprintf(stderr, "rma_bench: rank %d: %s\n", rank, what);
  _exit(1);
}

static void barrier(struct shared* sh, int* round, int rank) {
  int target = 2 * ++*round;
  atomic_fetch_add(&sh->arrived, 1);
  for (double end = now() + 120; atomic_load(&sh->arrived) < target; usleep(200))
    if (now() > end) die(rank, "the other rank did not reach the barrier in 120 s");
}

struct rank {
  const ncclRma_v14_t* rma;
  int me;
  void *init, *coll, *ctx, *mh, *sigMh;
  unsigned char* data;
  volatile uint64_t* sig;
  size_t bytes;
};

static void waitReq(struct rank* k, void* req) {
  int done = 0;
  for (double end = now() + 120; !done;) {
    if (k->rma->test(k->coll, req, &done) != ncclSuccess) die(k->me, "test() failed");
    if (!done && now() > end) die(k->me, "a request did not complete in 120 s");
  }
}

/* iters operations of `size` bytes (put or get) to rank 1, `depth` in flight; seconds. */
static double stream(struct rank* k, int get, size_t size, int iters, int depth) {
  void* reqs[128];
  int head = 0, tail = 0;
  double t0 = now();
  while (tail < iters) {
    while (head < iters && head - tail < depth) {
      void** r = &reqs[head % depth];
      uint64_t off = (uint64_t)(head % depth) * size;  /* each in-flight one its own slot */
      ncclResult_t res = get ? k->rma->iget(k->ctx, 0, off, k->mh, size, off, k->mh, 1, r)
                             : k->rma->iput(k->ctx, 0, off, k->mh, size, off, k->mh, 1, r);
      if (res != ncclSuccess || *r == NULL) die(k->me, get ? "iget failed" : "iput failed");
      head++;
    }
    waitReq(k, reqs[tail % depth]);
    tail++;
  }
  return now() - t0;
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* put of 8 B + signal ADD 1 to the peer; waits for the peer's answer on its own signal word.
 * Each end reaps its previous request's completion after posting the next one (as a proxy
 * tests its requests while others are in flight): the time is signal to signal. */
static void pingPong(struct rank* k, struct shared* sh, int* round) {
  int peer = 1 - k->me, n = (int)opt.latIters;
  double* t = malloc(sizeof(double) * (size_t)n);
  if (t == NULL) die(k->me, "no memory");
  barrier(sh, round, k->me);
  void* prev = NULL;
  for (int i = 0; i < n; i++) {
    double t0 = now();
    void* req = NULL;
    if (k->me == 1)
      for (double end = now() + 60; k->sig[0] < (uint64_t)i + 1;)
        if (now() > end) die(k->me, "the ping's signal did not come in 60 s");
    if (k->rma->iputSignal(k->ctx, 0, 0, k->mh, 8, 0, k->mh, peer, 0, k->sigMh, 1, NCCL_NET_SIGNAL_OP_ADD, true,
                           &req) != ncclSuccess || req == NULL)
      die(k->me, "iputSignal failed");
    if (prev) waitReq(k, prev);
    prev = req;
    if (k->me == 0)
      for (double end = now() + 60; k->sig[0] < (uint64_t)i + 1;)
        if (now() > end) die(k->me, "the pong's signal did not come in 60 s");
    t[i] = (now() - t0) * 1e6;
  }
  waitReq(k, prev);
  if (k->me == 0) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    qsort(t, (size_t)n, sizeof(double), cmpDouble);
    printf("rma_putsignal_rtt\t8\t%d\t%.2f\t%.2f\n", n, t[n / 2], sum / n);
  }
  free(t);
}

static void setUp(struct rank* k, struct shared* sh, int* round) {
  void* lc = NULL;
  int ndev = 0;
  if (k->rma->init(&k->init, 0xbe7c, NULL) != ncclSuccess) die(k->me, "init failed");
  if (k->rma->devices(&ndev) != ncclSuccess || ndev < 1) die(k->me, "no RMA device");
  if (k->rma->listen(k->init, k->me % ndev, sh->handles[k->me], &lc) != ncclSuccess) die(k->me, "listen failed");
  barrier(sh, round, k->me);
  void* handles[2] = {sh->handles[0], sh->handles[1]};
  if (k->rma->connect(k->init, handles, 2, k->me, lc, &k->coll) != ncclSuccess) die(k->me, "connect failed");
  k->rma->closeListen(lc);
  ncclRmaConfig_v14_t cfg = {1, NCCL_NET_TRAFFIC_CLASS_UNDEF, 1};
  if (k->rma->createContext(k->coll, &cfg, &k->ctx) != ncclSuccess) die(k->me, "createContext failed");
  k->data = mmap(NULL, k->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  k->sig = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (k->data == MAP_FAILED || k->sig == MAP_FAILED) die(k->me, "mmap failed");
  memset(k->data, 0x5a, k->bytes);
  if (k->rma->regMrSym(k->coll, k->data, k->bytes, NCCL_PTR_HOST, 0, &k->mh) != ncclSuccess ||
      k->rma->regMrSym(k->coll, (void*)k->sig, 8, NCCL_PTR_HOST, NCCL_NET_MR_FLAG_FORCE_SO, &k->sigMh) != ncclSuccess)
    die(k->me, "regMrSym failed");
}

static void runRank(int me, struct shared* sh) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(me, &cpus);
  if (sysconf(_SC_NPROCESSORS_ONLN) > me) (void)sched_setaffinity(0, sizeof(cpus), &cpus);
  struct rank k = {railnetGetRma(), me, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 4 << 20};
  for (int i = 0; i < opt.nsizes; i++)
    if (opt.sizes[i] * 2 > k.bytes) k.bytes = opt.sizes[i] * 2;  /* at least two in flight */
  int round = 0;
  setUp(&k, sh, &round);
  for (int get = 0; get < 2; get++)
    for (int i = 0; i < opt.nsizes; i++) {
      size_t size = opt.sizes[i];
      long iters = (opt.mib << 20) / (long)size;
      iters = iters < 8 ? 8 : iters > MAX_ITERS ? MAX_ITERS : iters;
      int depth = (int)((4 << 20) / size);
      depth = depth < 2 ? 2 : depth > 128 ? 128 : depth;
      if (depth > iters) depth = (int)iters;
      if ((size_t)depth * size > k.bytes) depth = (int)(k.bytes / size);
      barrier(sh, &round, me);
      if (me == 0) {
        stream(&k, get, size, (int)(iters / 10 < 2 ? 2 : iters / 10), depth); /* warmup */
        double s = stream(&k, get, size, (int)iters, depth);
        printf("%s\t%zu\t%ld\t%.2f\n", get ? "rma_get_bw" : "rma_put_bw", size, iters, (double)size * iters / s / 1e6);
        fflush(stdout);
      }
    }
  pingPong(&k, sh, &round);
  fflush(stdout);
  barrier(sh, &round, me);  /* nobody deregisters what the other still uses */
  k.rma->deregMrSym(k.coll, k.mh);
  k.rma->deregMrSym(k.coll, k.sigMh);
  k.rma->destroyContext(k.ctx);
  k.rma->closeColl(k.coll);
  k.rma->finalize(k.init);
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      opt.nsizes = 0;
      for (char *s = argv[++i], *end; *s && opt.nsizes < MAX_SIZES; s = end) {
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s || v == 0 || v > (64ull << 20)) {
          fprintf(stderr, "rma_bench: --sizes takes sizes of 1 B to 64 MiB\n");
          return 2;
        }
        opt.sizes[opt.nsizes++] = (size_t)v;
        while (*end == ' ') end++;
      }
    } else if (!strcmp(argv[i], "--mib") && i + 1 < argc) {
      opt.mib = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--lat-iters") && i + 1 < argc) {
      opt.latIters = atol(argv[++i]);
    } else {
      fprintf(stderr, "usage: rma_bench [--sizes \"S ...\"] [--mib M] [--lat-iters N]\n");
      return 2;
    }
  }
  if (opt.mib < 1 || opt.latIters < 1 || opt.latIters > 1000000) {
    fprintf(stderr, "rma_bench: --mib and --lat-iters take a positive count\n");
    return 2;
  }
  struct shared* sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  memset(sh, 0, sizeof(*sh));
  pid_t pids[2];
  for (int me = 0; me < 2; me++)
    if ((pids[me] = fork()) == 0) {
      runRank(me, sh);
      _exit(0);
    }
  int bad = 0;
  for (int me = 0; me < 2; me++) {
    int st = 0;
    waitpid(pids[me], &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  return bad;
}
