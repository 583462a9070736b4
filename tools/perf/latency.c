/* The latency test, as ib_write_lat: a ping-pong per message, comm pair k mod --comms for
 * message k; latency is half the round trip. */
#include "perf.h"

int clientLatency(ends* e, const size_t* sizes, int nSizes, double* stamps) {
  int bad = 0;
  latHeader();
  for (int i = 0; i < nSizes; i++) {
    e->deadline = nowSec() + opt.timeoutSec;
    progress("lat", sizes[i], 0, opt.iters);
    for (int k = 0; k < opt.warmup + opt.iters; k++) {
      if ((k & 63) == 63) progress("lat", sizes[i], k + 1, opt.warmup + opt.iters);
      double t0 = nowSec();
      msgReqs pong, ping;
      tally ignored = {0};
      postMsg(e, 0, k % e->n, sizes[i], &pong);
      postMsg(e, 1, k % e->n, sizes[i], &ping);
      waitMsg(e, 1, sizes[i], &ping, &ignored);
      waitMsg(e, 0, sizes[i], &pong, &ignored);
      if (k >= opt.warmup) stamps[k - opt.warmup] = (nowSec() - t0) * 1e6 / 2;
    }
    perfAck a = recvAck(e);
    progressEnd();
    latRow(sizes[i], opt.iters, stamps, &a);
    bad += !a.ok;
  }
  return bad;
}

void serverLatency(ends* e, const perfConfig* cfg, size_t size, tally* got) {
  int n = cfg->warmup + cfg->iters;
  /* the receive of ping k+1 is posted before pong k goes out, as the client posts its
   * pong receive before its ping: no clear-to-send waits inside the timed round trip */
  msgReqs ping;
  postMsg(e, 0, 0, size, &ping);
  for (int k = 0; k < n; k++) {
    msgReqs m;
    tally sent = {0};
    waitMsg(e, 0, size, &ping, got);
    if (k + 1 < n) postMsg(e, 0, (k + 1) % e->n, size, &ping);
    postMsg(e, 1, k % e->n, size, &m);
    waitMsg(e, 1, size, &m, &sent);
  }
}
