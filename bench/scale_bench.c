/*
 * scale_bench: the cost of N comm pairs through any net plugin's ncclNet v11 ABI (railnet
 * exports v8..v12, Mellanox's nccl-rdma-sharp-plugins v6..v11), opened the way NCCL opens
 * them: one listen comm per receive comm, the connects and accepts progressed together (each
 * call advances every comm not ready yet), one 64 KiB buffer registered per comm.
 *
 *   scale_bench --plugin PATH --comms N [--send-dev D] [--recv-dev D] [--send-hca NAME]
 *               [--recv-hca NAME] [--timeout S]
 * --send-hca/--recv-hca: NCCL_IB_HCA==NAME in that side only (set before the plugin loads).
 *
 * The receiver is this process, the sender a child (fork before the plugin is loaded; each
 * loads and inits it on its own); the N handles go to the child over a socketpair, which
 * also carries the barriers between the phases. Each side measures against its own figures
 * right after init (VmRSS and Threads from /proc/self/status, entries of /proc/self/fd):
 *   setup:  the time from the first listen/connect until every comm is ready and registered;
 *   open:   RSS, fds and threads with N comms open and registered (the 64 KiB buffers are
 *           mmap'ed and touched before the baseline, so they are not counted);
 *   first:  the time until an 8-byte message went over every comm (irecv on all, isend on
 *           all, test until all are done);
 *   closed: after deregMr and closeSend/closeRecv/closeListen of everything: what is left.
 * One line per side (sender first), tab-separated:
 *   scale ROLE N SETUP_MS RSS_KiB FDS THREADS FIRST_MS CLOSED_RSS_KiB CLOSED_FDS CLOSED_THREADS
 * RSS, FDS, THREADS: growth over the baseline with N comms open; CLOSED_*: growth left after
 * closing (after malloc_trim, so freed heap malloc kept does not count). RSS is Rss of
 * /proc/self/smaps_rollup (see measure()). Exit status 0, or 1 with a line on stderr.
 */
#include <dirent.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <railnet_net/net.h>
#include "plugin_load.h"

#define BUF_SIZE (64 << 10)

static const ncclNet_v11_t* net;
static void* ctx;
static const char* role = "recv";

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "scale_bench (%s): ", role);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

#define CK(call)                                       \
  do {                                                 \
    ncclResult_t r_ = (call);                          \
    if (r_ != ncclSuccess) die("%s: %d", #call, (int)r_); \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct usage {
  long rssKiB, fds, threads;
};

/* RSS from the page tables (smaps_rollup), not VmRSS: before Linux 6.2 VmRSS lags behind by
 * what each thread has not synced yet, and the pages a verbs provider maps for its queues
 * (rxe: the QP and CQ rings, through /dev/infiniband/uverbsN) come in all at once at mmap. */
static void measure(struct usage* u) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long vmRss = 0, rollup = -1;
  u->threads = 0;
  while (f && fgets(line, sizeof(line), f)) {
    sscanf(line, "VmRSS: %ld", &vmRss);
    sscanf(line, "Threads: %ld", &u->threads);
  }
  if (f) fclose(f);
  f = fopen("/proc/self/smaps_rollup", "r");
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "Rss: %ld", &rollup) == 1) break;
  if (f) fclose(f);
  u->rssKiB = rollup >= 0 ? rollup : vmRss;
  u->fds = 0;
  DIR* d = opendir("/proc/self/fd");
  for (struct dirent* e; d && (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') u->fds++;
  if (d) closedir(d);
  u->fds--; /* the directory's own */
}

static void load(const char* path) {
  char err[1200];
  void* h = pluginOpenFirst(&path, 1, NULL, 0, err, sizeof(err));
  if (h == NULL) die("cannot dlopen %s: %s", path, err);
  net = pluginFindNet(h, 11, 11, NULL);
  if (net == NULL) die("%s does not export ncclNetPlugin_v11", path);
  pluginLog.prefix = role; /* "ROLE: NCCL WARN file:line msg", WARNs only */
  CK(net->init(&ctx, 0, NULL, pluginLogger, NULL));
  int n = 0;
  CK(net->devices(&n));
  if (n < 1) die("%s has no device", net->name);
}

static void xfer(int fd, void* p, size_t n, int out) {
  char* c = p;
  while (n > 0) {
    ssize_t k = out ? write(fd, c, n) : read(fd, c, n);
    if (k <= 0) die("the other side went away");
    c += k;
    n -= (size_t)k;
  }
}

static void barrier(int fd) {
  char b = 1;
  xfer(fd, &b, 1, 1);
  xfer(fd, &b, 1, 0);
}

struct side {
  int n, isSend, dev, fd;
  void **comms, **listens, **mh;
  char** bufs;
  struct usage base, open, closed;
  double setupMs, firstMs;
};

/* Every comm connected (sender) or accepted (receiver), and its buffer registered. */
static void openAll(struct side* s, char (*handles)[NCCL_NET_HANDLE_MAXSIZE]) {
  double t0 = now();
  if (!s->isSend)
    for (int i = 0; i < s->n; i++) CK(net->listen(ctx, s->dev, handles[i], &s->listens[i]));
  xfer(s->fd, handles, (size_t)s->n * NCCL_NET_HANDLE_MAXSIZE, !s->isSend);
  for (int left = s->n; left > 0;) {
    for (int i = 0; i < s->n; i++) {
      if (s->comms[i]) continue;
      void* devh = NULL;
      if (s->isSend)
        CK(net->connect(ctx, s->dev, handles[i], &s->comms[i], (ncclNetDeviceHandle_v11_t**)&devh));
      else
        CK(net->accept(s->listens[i], &s->comms[i], (ncclNetDeviceHandle_v11_t**)&devh));
      if (s->comms[i]) left--;
    }
  }
  for (int i = 0; i < s->n; i++) CK(net->regMr(s->comms[i], s->bufs[i], BUF_SIZE, NCCL_PTR_HOST, &s->mh[i]));
  s->setupMs = (now() - t0) * 1e3;
}

/* One 8-byte message over every comm. */
static void firstMessage(struct side* s) {
  void** reqs = calloc((size_t)s->n, sizeof(void*));
  if (reqs == NULL) die("out of memory");
  double t0 = now();
  for (int posted = 0; posted < s->n;) {
    for (int i = 0; i < s->n; i++) {
      if (reqs[i]) continue;
      if (s->isSend) {
        CK(net->isend(s->comms[i], s->bufs[i], 8, 1, s->mh[i], NULL, &reqs[i]));
      } else {
        void* data = s->bufs[i];
        size_t size = BUF_SIZE;
        int tag = 1;
        CK(net->irecv(s->comms[i], 1, &data, &size, &tag, &s->mh[i], NULL, &reqs[i]));
      }
      if (reqs[i]) posted++;
    }
  }
  for (int left = s->n; left > 0;) {
    for (int i = 0; i < s->n; i++) {
      if (reqs[i] == NULL) continue;
      int done = 0, size = 0;
      CK(net->test(reqs[i], &done, &size));
      if (done) {
        if (size != 8) die("comm %d: test() reported %d bytes, 8 were sent", i, size);
        reqs[i] = NULL;
        left--;
      }
    }
  }
  s->firstMs = (now() - t0) * 1e3;
  free(reqs);
}

static void closeAll(struct side* s) {
  for (int i = 0; i < s->n; i++) {
    CK(net->deregMr(s->comms[i], s->mh[i]));
    CK(s->isSend ? net->closeSend(s->comms[i]) : net->closeRecv(s->comms[i]));
    if (!s->isSend) CK(net->closeListen(s->listens[i]));
  }
}

/* SCALE_BENCH_SMAPS=DIR: /proc/self/smaps into DIR/smaps.ROLE.N.WHEN (what grew, by mapping), and
 * malloc's view on stderr (heap in use, and freed but kept: resident all the same) */
static void dumpSmaps(const struct side* s, const char* when) {
  const char* dir = getenv("SCALE_BENCH_SMAPS");
  if (dir == NULL) return;
  struct mallinfo2 mi = mallinfo2();
  fprintf(stderr, "scale_bench: %s %s: malloc in use %zu KiB, free in the heap %zu KiB, mmapped %zu KiB\n", role, when,
          mi.uordblks >> 10, mi.fordblks >> 10, mi.hblkhd >> 10);
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "cat /proc/%d/smaps > %s/smaps.%s.%d.%s", (int)getpid(), dir, role, s->n, when);
  if (system(cmd) != 0) fprintf(stderr, "scale_bench: %s failed\n", cmd);
}

static void run(struct side* s, const char* plugin, const char* hca) {
  char env[128];
  if (hca) {
    snprintf(env, sizeof(env), "=%s", hca);
    setenv("NCCL_IB_HCA", env, 1);
  }
  s->comms = calloc((size_t)s->n, sizeof(void*));
  s->listens = calloc((size_t)s->n, sizeof(void*));
  s->mh = calloc((size_t)s->n, sizeof(void*));
  s->bufs = calloc((size_t)s->n, sizeof(char*));
  char(*handles)[NCCL_NET_HANDLE_MAXSIZE] = calloc((size_t)s->n, NCCL_NET_HANDLE_MAXSIZE);
  if (!s->comms || !s->listens || !s->mh || !s->bufs || !handles) die("out of memory");
  for (int i = 0; i < s->n; i++) {
    s->bufs[i] = mmap(NULL, BUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s->bufs[i] == MAP_FAILED) die("mmap of a buffer failed");
    memset(s->bufs[i], 0x5a, BUF_SIZE);
  }
  load(plugin);
  measure(&s->base);
  dumpSmaps(s, "base");
  barrier(s->fd);
  openAll(s, handles);
  measure(&s->open);
  dumpSmaps(s, "open");
  barrier(s->fd);
  firstMessage(s);
  barrier(s->fd);
  closeAll(s);
  /* the plugin stays initialized, as in NCCL between communicators; what malloc keeps of
   * the freed heap goes back first, so that what is left is what the plugin still holds */
  malloc_trim(0);
  measure(&s->closed);
  barrier(s->fd);
  printf("scale\t%s\t%d\t%.1f\t%ld\t%ld\t%ld\t%.1f\t%ld\t%ld\t%ld\n", role, s->n, s->setupMs,
         s->open.rssKiB - s->base.rssKiB, s->open.fds - s->base.fds, s->open.threads - s->base.threads, s->firstMs,
         s->closed.rssKiB - s->base.rssKiB, s->closed.fds - s->base.fds, s->closed.threads - s->base.threads);
  fflush(stdout);
}

int main(int argc, char** argv) {
  const char* plugin = NULL;
  const char *shca = NULL, *rhca = NULL;
  int n = 1, sdev = 0, rdev = 0, timeout = 600;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--plugin")) plugin = argv[i + 1];
    else if (!strcmp(argv[i], "--comms")) n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--send-dev")) sdev = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--recv-dev")) rdev = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--send-hca")) shca = argv[i + 1];
    else if (!strcmp(argv[i], "--recv-hca")) rhca = argv[i + 1];
    else if (!strcmp(argv[i], "--timeout")) timeout = atoi(argv[i + 1]);
    else die("unknown option %s", argv[i]);
  }
  if (plugin == NULL || n < 1) die("usage: scale_bench --plugin PATH --comms N [--send-dev D] [--recv-dev D]");
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair failed");
  alarm((unsigned)timeout);
  pid_t pid = fork();
  if (pid < 0) die("fork failed");
  struct side s;
  memset(&s, 0, sizeof(s));
  s.n = n;
  if (pid == 0) {
    role = "send";
    close(sv[0]);
    s.isSend = 1, s.dev = sdev, s.fd = sv[1];
    run(&s, plugin, shca);
    _exit(0);
  }
  close(sv[1]);
  s.dev = rdev, s.fd = sv[0];
  run(&s, plugin, rhca);
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) die("the sender failed");
  return 0;
}
