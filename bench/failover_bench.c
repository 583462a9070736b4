/*
 * bench/failover_bench: bandwidth of a fused IB comm around a port failure, through a
 * plugin's ncclNetPlugin_v12 (--plugin PATH, default build/lib/libnccl-net-railnet.so;
 * bench/ib.sh runs it in the soft-RoCE VM with a second veth pair).
 * The sender fuses --send-devs, the receiver --recv-devs (both in this process); 1 MiB
 * messages, 8 in flight. Phases, each --mib MiB:
 *   before      both devices up;
 *   during      --fault CMD runs as it starts (the comm fails over inside it);
 *   after       on the device left;
 *   recovering  --restore CMD runs, messages move until railnet logs that the device carries
 *               traffic again (at most 60 s; needs NCCL_IB_RESILIENCY_PORT_RECOVERY=1);
 *   recovered   both devices again.
 * --plain: one phase, steady. Prints "phase NAME MIB SECONDS MBps" per phase.
 * --notice: the before and during phases only, then "notice SECONDS": from the --fault
 * command to railnet's first "port failover:" WARN (how long the loss took to notice), and
 * --restore. Without such a WARN (the comm failed, or nothing was noticed) it exits 1.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <railnet_net/net.h>
#include "plugin_load.h"

#define MSG (1u << 20)
#define WINDOW 8

static const ncclNet_t* net;
static void *ctx, *sc, *rc, *smh, *rmh;
static char *sbuf, *rbuf;
static volatile int recovered, verbose;
static volatile double faultAt, noticedAt; /* the --fault command's start; the first failover WARN */

static double nowSec(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* pluginLog.watch: what the bench looks for in the plugin's lines, and the lines it prints */
static int watch(ncclDebugLogLevel level, const char* msg) {
  if (strstr(msg, "carries the send comm's traffic")) recovered = 1;
  if (faultAt > 0 && noticedAt == 0 && level == NCCL_LOG_WARN && strstr(msg, "port failover: ")) noticedAt = nowSec();
  if (level == NCCL_LOG_WARN || (verbose && (strstr(msg, "failover") || strstr(msg, "recovery"))))
    fprintf(stderr, "failover_bench: %s\n", msg);
  return 1;
}

/* "a,b": the vDevice of the two */
static int fuse(const char* list) {
  char a[64], b[64];
  if (sscanf(list, "%63[^,],%63s", a, b) != 2) return -1;
  const char* missing[2];
  int d = pluginFuseNamed(net, a, b, missing);
  for (int i = 0; i < 2; i++)
    if (missing[i]) fprintf(stderr, "failover_bench: no device %s\n", missing[i]);
  return d;
}

static int connectPair(int sdev, int rdev) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = NULL;
  if (net->listen(ctx, rdev, handle, &lc) != ncclSuccess) return -1;
  double end = nowSec() + 60;
  while ((sc == NULL || rc == NULL) && nowSec() < end) {
    ncclNetDeviceHandle_t* dh = NULL;
    if (sc == NULL && net->connect(ctx, sdev, handle, &sc, &dh) != ncclSuccess) return -1;
    if (rc == NULL && net->accept(lc, &rc, &dh) != ncclSuccess) return -1;
  }
  net->closeListen(lc);
  if (sc == NULL || rc == NULL) return -1;
  if (net->regMr(sc, sbuf, (size_t)MSG * WINDOW, NCCL_PTR_HOST, &smh) != ncclSuccess) return -1;
  return net->regMr(rc, rbuf, (size_t)MSG * WINDOW, NCCL_PTR_HOST, &rmh) == ncclSuccess ? 0 : -1;
}

/* count messages (or, count < 0, until recovered or 60 s); sends in the order of the receives */
static int move(int count) {
  void *rr[WINDOW] = {0}, *sr[WINDOW] = {0};
  int sent[WINDOW] = {0}, rdone[WINDOW] = {0}, sdone[WINDOW] = {0}, busy[WINDOW] = {0};
  int nextRecv = 0, nextSend = 0, finished = 0;
  double end = nowSec() + 120;
  while (count < 0 ? !(recovered && finished == nextRecv) : finished < count) {
    if (nowSec() > end) {
      fprintf(stderr, "failover_bench: %d messages done, the rest did not complete within 120 s\n", finished);
      return -1;
    }
    int w = nextRecv % WINDOW;
    if ((count < 0 ? !recovered : nextRecv < count) && !busy[w]) {
      void* data = rbuf + (size_t)w * MSG;
      size_t size = MSG;
      int tag = 0;
      if (net->irecv(rc, 1, &data, &size, &tag, &rmh, NULL, &rr[w]) != ncclSuccess) return -1;
      if (rr[w]) {
        busy[w] = 1;
        sent[w] = rdone[w] = sdone[w] = 0;
        nextRecv++;
      }
    }
    if (nextSend < nextRecv && !sent[nextSend % WINDOW]) {
      int s = nextSend % WINDOW;
      if (net->isend(sc, sbuf + (size_t)s * MSG, MSG, 0, smh, NULL, &sr[s]) != ncclSuccess) return -1;
      if (sr[s]) sent[s] = 1, nextSend++;
    }
    for (int k = 0; k < WINDOW; k++) {
      int done = 0;
      if (!busy[k]) continue;
      if (sent[k] && !sdone[k]) {
        if (net->test(sr[k], &done, NULL) != ncclSuccess) return -1;
        sdone[k] = done;
      }
      if (!rdone[k]) {
        int got = 0;
        if (net->test(rr[k], &done, &got) != ncclSuccess) return -1;
        rdone[k] = done;
      }
      if (sdone[k] && rdone[k]) busy[k] = 0, finished++;
    }
  }
  return finished;
}

static int phase(const char* name, int count, const char* cmd) {
  double t0 = nowSec();
  if (cmd && faultAt == 0) faultAt = t0;
  if (cmd && system(cmd) != 0) fprintf(stderr, "failover_bench: %s failed\n", cmd);
  int n = move(count);
  if (n < 0) return -1;
  double secs = nowSec() - t0;
  printf("phase %s %d %.3f %.2f\n", name, n, secs, secs > 0 ? n * (MSG / 1e6) / secs : 0.0);
  fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  const char *sdevs = "rxe0,rxe2", *rdevs = "rxe1,rxe3", *fault = NULL, *restore = NULL;
  const char* plugin = "build/lib/libnccl-net-railnet.so";
  int mib = 32, plain = 0, notice = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--plain")) plain = 1;
    else if (!strcmp(argv[i], "--notice")) notice = 1;
    else if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--mib")) mib = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--plugin")) plugin = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--send-devs")) sdevs = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--recv-devs")) rdevs = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--fault")) fault = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--restore")) restore = argv[++i];
    else {
      fprintf(stderr, "usage: failover_bench [--plugin PATH] [--mib M] [--plain | [--notice] --fault CMD --restore CMD] "
                      "[--send-devs a,b] [--recv-devs c,d] [-v]\n");
      return 2;
    }
  }
  if (mib < 1 || (!plain && (fault == NULL || restore == NULL))) {
    fprintf(stderr, "failover_bench: --mib >= 1; --fault and --restore unless --plain\n");
    return 2;
  }
  char err[1200];
  void* lib = pluginOpenFirst(&plugin, 1, NULL, 0, err, sizeof(err));
  net = lib ? pluginFindNet(lib, 12, 12, NULL) : NULL;
  if (net == NULL) {
    fprintf(stderr, "failover_bench: no ncclNetPlugin_v12 in %s: %s\n", plugin, lib ? dlerror() : err);
    return 1;
  }
  pluginLog.watch = watch;
  sbuf = calloc(WINDOW, MSG);
  rbuf = calloc(WINDOW, MSG);
  if (sbuf == NULL || rbuf == NULL || net->init(&ctx, 0, NULL, pluginLogger, NULL) != ncclSuccess) return 1;
  int sdev = fuse(sdevs), rdev = fuse(rdevs);
  if (sdev < 0 || rdev < 0 || connectPair(sdev, rdev) != 0) {
    fprintf(stderr, "failover_bench: no fused comm %s -> %s\n", sdevs, rdevs);
    return 1;
  }
  int bad = move(WINDOW) < 0; /* warm-up */
  if (plain) {
    bad = bad || phase("steady", mib, NULL);
  } else if (notice) {
    bad = bad || phase("before", mib, NULL) || phase("during", mib, fault);
    if (noticedAt > 0) printf("notice %.3f\n", noticedAt - faultAt);
    bad = bad || noticedAt == 0;
    if (system(restore) != 0) fprintf(stderr, "failover_bench: %s failed\n", restore);
  } else
    bad = bad || phase("before", mib, NULL) || phase("during", mib, fault) || phase("after", mib, NULL) ||
         phase("recovering", -1, restore) || phase("recovered", mib, NULL);
  net->deregMr(sc, smh);
  net->deregMr(rc, rmh);
  net->closeSend(sc);
  net->closeRecv(rc);
  net->finalize(ctx);
  return bad;
}
