/* railnet-perf's results: perftest's tables (ib_write_bw / ib_write_lat columns) on stdout,
 * or one JSON document (through tools/common/json.h), or CSV rows; the receiver's table of
 * what it counted. */
#include <stdlib.h>
#include "json.h"
#include "perf.h"

static const char* line = "---------------------------------------------------------------------------------------";

void bwHeader(void) {
  if (opt.json || opt.csv) {
    if (opt.csv)
      printf("test,bytes,iterations,bw_peak_MBps,bw_avg_MBps,msg_rate_Mpps,recvs,comms,memory,bytes_sent,"
             "recv_messages,recv_buffers,recv_bytes,recv_check\n");
    return;
  }
  printf("%s\n %-10s %-13s %-18s %-20s %s\n", line, "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]",
         "MsgRate[Mpps]");
}
/* What the receiver counted for a row of the client's results. */
static void ackJson(const perfAck* a) {
  jInt("recv_messages", (long long)a->messages);
  jInt("recv_buffers", (long long)a->buffers);
  jInt("recv_bytes", (long long)a->bytes);
  jStr("recv_check", a->ok ? "ok" : "wrong");
}

void bwRow(size_t size, int iters, double peak, double avg, double mpps, long long sent, const perfAck* a) {
  const char* check = a->ok ? "ok" : "wrong";
  if (opt.csv)
    printf("bw,%zu,%d,%.2f,%.2f,%.6f,%d,%d,%s,%lld,%lld,%lld,%lld,%s\n", size, iters, peak, avg, mpps, opt.recvs,
           opt.comms, memoryName(), sent, (long long)a->messages, (long long)a->buffers, (long long)a->bytes, check);
  else if (opt.json) {
    jOpen(NULL, '{');
    jStr("test", "bw");
    jInt("bytes", (long long)size);
    jInt("iterations", iters);
    jFixed("bw_peak_MBps", peak, 2);
    jFixed("bw_avg_MBps", avg, 2);
    jFixed("msg_rate_Mpps", mpps, 6);
    jInt("bytes_sent", sent);
    ackJson(a);
    jClose('}');
  }
  else printf(" %-10zu %-13d %-18.2f %-20.2f %.6f\n", size, iters, peak, avg, mpps);
  fflush(stdout);
}
void latHeader(void) {
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
void latRow(size_t size, int iters, double* t, const perfAck* a) {
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
  else if (opt.json) {
    jOpen(NULL, '{');
    jStr("test", "lat");
    jInt("bytes", (long long)size);
    jInt("iterations", iters);
    jFixed("t_min_us", t[0], 2);
    jFixed("t_max_us", t[iters - 1], 2);
    jFixed("t_typical_us", t[iters / 2], 2);
    jFixed("t_avg_us", avg, 2);
    jFixed("t_stdev_us", sd, 2);
    jFixed("t_99_us", p99, 2);
    ackJson(a);
    jClose('}');
  } else
    printf(" %-10zu %-12d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %.2f\n", size, iters, t[0], t[iters - 1], t[iters / 2],
           avg, sd, p99);
  fflush(stdout);
}
void settingsLine(const char* who) {
  if (opt.json || opt.csv) return;
  char mem[32] = "host";
  if (cudaGpu() >= 0) snprintf(mem, sizeof(mem), "CUDA (GPU %d)", cudaGpu());
  char posted[48] = "";
  if (opt.recvSize) snprintf(posted, sizeof(posted), " of %zu bytes (at least)", opt.recvSize);
  printf(" Settings%s: %d buffer(s)%s per irecv, %d comm pair(s), %s memory\n", who, opt.recvs, posted, opt.comms, mem);
}

void printDevice(void) {
  int ndev = 0;
  devProps p = {0};
  NETCALL(netDevices(&ndev));
  if (opt.dev < 0 || opt.dev >= ndev) die("%s has %d device(s); --dev %d does not exist", net.name, ndev, opt.dev);
  NETCALL(netProps(opt.dev, &p));
  if (opt.json || opt.csv) return;
  printf("%s\n railnet-perf: %s through %s (ncclNet v%d)\n Device: [%d] %s, %d Mb/s (%d device(s))\n", line, net.name,
         net.path, net.version, opt.dev, p.name ? p.name : "?", p.speed, ndev);
}

/* The settings both documents start with. */
static void settingsJson(const ends* e) {
  jStr("plugin", net.path);
  jStr("net", net.name);
  jInt("abi", net.version);
  jInt("dev", opt.dev);
  jStr("device", deviceName());
  jInt("recvs", e->recvs);
  jInt("comms", e->n);
  jStr("memory", memoryName());
  jInt("gpu", cudaGpu());
  jInt("recv_size", (long long)opt.recvSize);
}

void resultsBegin(const ends* e) {
  jOpen(NULL, '{');
  settingsJson(e);
  jOpenRows("results");
}
void resultsEnd(void) {
  if (opt.json) {
    jClose(']');
    jClose('}');
    putchar('\n');
  }
  else if (!opt.csv) printf("%s\n", line);
  fflush(stdout);
}

void receivedBegin(const ends* e) {
  if (opt.json) {
    jOpen(NULL, '{');
    jStr("role", "receiver");
    settingsJson(e);
    jOpenRows("received");
  } else if (!opt.csv)
    printf("%s\n receiver: %-10s %-12s %-16s %s\n", line, "#bytes", "#messages", "bytes received", "check");
}
void receivedRow(const char* test, size_t size, const tally* got, int ok) {
  if (opt.json) {
    jOpen(NULL, '{');
    jStr("test", test);
    jInt("bytes", (long long)size);
    jInt("messages", got->messages);
    jInt("buffers", got->buffers);
    jInt("bytes_received", got->bytes);
    jStr("check", ok ? "ok" : "wrong");
    jClose('}');
  } else if (opt.csv)
    printf("recv_%s,%zu,%lld,%lld,%s,%lld\n", test, size, got->messages, got->bytes, ok ? "ok" : "wrong", got->buffers);
  else
    printf(" receiver: %-10zu %-12lld %-16lld %s (%s)\n", size, got->messages, got->bytes, ok ? "ok" : "WRONG", test);
  fflush(stdout);
}
void receivedEnd(void) {
  if (opt.json) {
    jClose(']');
    jClose('}');
    putchar('\n');
  }
}
