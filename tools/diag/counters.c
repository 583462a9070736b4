/* Port error counters: the counters section (values since boot or the last reset) and
 * --watch (their growth, sampled every second; with the congestion counters of congestion.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "diag.h"

static const struct {
  const char* dir;
  const char* name;
  const char* cause;
  const char* fix;
} counterDefs[] = {
    {"counters", "symbol_error", "bit errors on the wire", "reseat or replace the cable/transceiver; mlxlink shows BER"},
    {"counters", "link_error_recovery", "the link retrained", "check cable and switch port (mlxlink, ibdiagnet)"},
    {"counters", "link_downed", "the link went down", "check cable, transceiver and switch port logs"},
    {"hw_counters", "rnr_nak_retry_err", "receiver-not-ready retries exhausted",
     "the peer posts receives too late: check that the peer process is alive and not stalled"},
    {"hw_counters", "packet_seq_err", "packets lost or reordered",
     "check for drops in the fabric (RoCE: PFC/ECN config, ethtool -S)"},
    {"hw_counters", "implied_nak_seq_err", "responses lost (implied NAK)",
     "check for drops in the fabric (RoCE: PFC/ECN config, ethtool -S)"},
    {"hw_counters", "local_ack_timeout_err", "ACKs did not arrive in time (transport retries)",
     "check congestion/drops; NCCL_IB_TIMEOUT raises the timeout"},
    /* rdma_rxe (soft-RoCE) has no counters/ directory: its error counters, by its own names */
    {"hw_counters", "link_downed", "the link went down", "check the netdev under the rxe device (ip link)"},
    {"hw_counters", "rcvd_seq_err", "packets lost or reordered (out-of-sequence PSN)",
     "check for drops on the netdev (ip -s link, ethtool -S)"},
    {"hw_counters", "completer_retry_err", "ACKs did not arrive in time (the sender retried)",
     "check congestion/drops; NCCL_IB_TIMEOUT raises the timeout"},
    {"hw_counters", "retry_exceeded_err", "transport retries exhausted: a QP went to the error state",
     "check that the peer is alive and reachable over the netdev without drops"},
    {"hw_counters", "retry_rnr_exceeded_err", "receiver-not-ready retries exhausted",
     "the peer posts receives too late: check that the peer process is alive and not stalled"},
    {"hw_counters", "send_err", "packets could not be sent (netdev down or out of buffers)",
     "check the netdev's state and drops (ip -s link)"},
};
#define N_COUNTERS ((int)(sizeof(counterDefs) / sizeof(counterDefs[0])))

static long long readCounterFile(const portInfo* p, int c) {
  char buf[64];
  if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/%s/%s", p->dev, p->port, counterDefs[c].dir,
              counterDefs[c].name) != 0)
    return -1;
  return strtoll(buf, NULL, 10);
}
/* -1 when the device does not expose the counter, or exposes it under an earlier entry's
 * directory (link_downed: counters/ on real HCAs, hw_counters/ on rxe; shown once). */
static long long readCounter(const portInfo* p, int c) {
  for (int e = 0; e < c; e++)
    if (strcmp(counterDefs[e].name, counterDefs[c].name) == 0 && readCounterFile(p, e) >= 0) return -1;
  return readCounterFile(p, c);
}

void sectionCounters(void) {
  section("counters", "Port error counters (since boot or the last reset)");
  if (nPorts == 0) {
    text("  no RDMA ports\n");
    return;
  }
  jOpen("ports", '[');
  for (int i = 0; i < nPorts; i++) {
    portInfo* p = &ports[i];
    jOpen(NULL, '{');
    jStr("device", p->dev);
    jInt("port", p->port);
    text("  %s:%d", p->dev, p->port);
    int shown = 0;
    for (int c = 0; c < N_COUNTERS; c++) {
      long long v = readCounter(p, c);
      if (v < 0) continue;
      jInt(counterDefs[c].name, v);
      text(" %s=%lld", counterDefs[c].name, v);
      shown++;
    }
    text("%s\n", shown ? "" : " (no error counters exposed)");
    jClose('}');
    for (int c = 0; c < N_COUNTERS; c++) {
      long long v = readCounter(p, c);
      if (v > 0) {
        char fix[384];
        sfmt(fix, sizeof(fix), "run railnet-diag --watch 60 during a job: if it grows, %s", counterDefs[c].fix);
        WARNING(fix, "%s:%d %s=%lld: %s", p->dev, p->port, counterDefs[c].name, v, counterDefs[c].cause);
      }
    }
  }
  jClose(']');
}

int watchCounters(int seconds) {
  sectionName("watch");
  jOpen("watch", '{');
  jInt("seconds", seconds);
  if (nPorts == 0) {
    text("no RDMA ports under %s/class/infiniband: nothing to watch\n", sysfsRoot);
    jOpen("growth", '[');
    jClose(']');
    jClose('}');
    return 0;
  }
  static long long first[MAX_PORTS][N_COUNTERS], prev[MAX_PORTS][N_COUNTERS];
  for (int i = 0; i < nPorts; i++)
    for (int c = 0; c < N_COUNTERS; c++) first[i][c] = prev[i][c] = readCounter(&ports[i], c);
  int roce = congestionWatchStart();
  /* said once the first samples are taken (with --json on standard error: the JSON comes at the end) */
  FILE* o = jsonMode ? stderr : stdout;
  fprintf(o, "watching error counters of %d port(s) for %d s (growth per second is printed)\n", nPorts, seconds);
  if (roce) fprintf(o, "and the congestion counters of %d RoCE port(s): hw_counters/, ethtool -S of the netdev\n", roce);
  fflush(o);
  for (int t = 1; t <= seconds; t++) {
    sleep(1);
    for (int i = 0; i < nPorts; i++)
      for (int c = 0; c < N_COUNTERS; c++) {
        long long v = readCounter(&ports[i], c);
        if (v > prev[i][c] && prev[i][c] >= 0)
          text("  +%3ds %s:%d %s +%lld (now %lld)\n", t, ports[i].dev, ports[i].port, counterDefs[c].name,
               v - prev[i][c], v);
        prev[i][c] = v;
      }
    congestionWatchTick(t);
    fflush(stdout);
  }
  jOpen("growth", '[');
  text("growth over %d s:\n", seconds);
  int grew = 0;
  for (int i = 0; i < nPorts; i++)
    for (int c = 0; c < N_COUNTERS; c++) {
      if (first[i][c] < 0 || prev[i][c] <= first[i][c]) continue;
      grew = 1;
      long long d = prev[i][c] - first[i][c];
      jOpen(NULL, '{');
      jStr("device", ports[i].dev);
      jInt("port", ports[i].port);
      jStr("counter", counterDefs[c].name);
      jInt("delta", d);
      jClose('}');
      text("  %s:%d %s +%lld\n", ports[i].dev, ports[i].port, counterDefs[c].name, d);
    }
  jClose(']');
  if (!grew) text("  none: no error counter grew\n");
  grew |= congestionWatchEnd(seconds);
  jClose('}');
  for (int i = 0; i < nPorts; i++)
    for (int c = 0; c < N_COUNTERS; c++)
      if (first[i][c] >= 0 && prev[i][c] > first[i][c])
        PROBLEM(counterDefs[c].fix, "%s:%d %s grew by %lld in %d s: %s", ports[i].dev, ports[i].port,
                counterDefs[c].name, prev[i][c] - first[i][c], seconds, counterDefs[c].cause);
  congestionWatchJudge(seconds);
  return grew;
}
