/* The bandwidth test, as ib_write_bw: per size, warm-up messages, an ack, then --iters
 * messages with --window in flight per comm pair; the receiver acks with its counts. */
#include "perf.h"

/* Peak: the fastest stretch of w = max(2 x messages in flight, iters/8) consecutive sender
 * completions, the start counting as one (fewer would time bursts of completions). t0 is the
 * start, t the whole run's time. */
static double peakTime(const double* stamps, double t0, double t, int inFlight) {
  int w = opt.iters / 8 > 2 * inFlight ? opt.iters / 8 : 2 * inFlight;
  if (w > opt.iters) w = opt.iters;
  double best = t;
  for (int k = w; k <= opt.iters; k++) {
    double span = stamps[k - 1] - (k - w == 0 ? t0 : stamps[k - w - 1]);
    if (span > 0 && span * opt.iters / w < best) best = span * opt.iters / w;
  }
  return best;
}

int clientBandwidth(ends* e, const size_t* sizes, int nSizes, double* stamps) {
  int bad = 0;
  bwHeader();
  for (int i = 0; i < nSizes; i++) {
    e->deadline = nowSec() + opt.timeoutSec;
    progress("bw", sizes[i], 0, opt.iters);
    stream(e, 1, sizes[i], opt.warmup, opt.window, NULL, NULL);
    recvAck(e);
    tally sent = {0};
    double t0 = nowSec();
    stream(e, 1, sizes[i], opt.iters, opt.window, &sent, stamps);
    /* the clock stops at the last send completion, as ib_write_bw's: the server checks the
     * contents before it acks, and that check is not the network's time */
    double t = stamps[opt.iters - 1] - t0;
    perfAck a = recvAck(e);
    double best = peakTime(stamps, t0, t, opt.window * e->n);
    progressEnd();
    double mb = (double)sizes[i] * e->recvs * opt.iters / 1048576.0;
    bwRow(sizes[i], opt.iters, mb / best, mb / t, (double)opt.iters * e->recvs / t / 1e6, sent.bytes, &a);
    bad += !a.ok;
  }
  return bad;
}

void serverBandwidth(ends* e, const perfConfig* cfg, size_t size, tally* got) {
  stream(e, 0, size, cfg->warmup, cfg->window, got, NULL);
  sendAck(e, NULL);
  stream(e, 0, size, cfg->iters, cfg->window, got, NULL);
}
