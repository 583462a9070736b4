/* A window of messages through a comm (net_window.h). */
#include "net_window.h"

int netWindowRun(const netWindowOps* ops, int n, int window) {
  if (window < 1) window = 1;
  int head = 0, tail = 0; /* posted: [tail, head) */
  while (tail < n) {
    while (head < n && head - tail < window) {
      int r = ops->post(ops->arg, head);
      if (r < 0) return r;
      if (r > 0) break; /* not taken: complete something first */
      head++;
    }
    int done = tail < head ? ops->test(ops->arg, tail) : 0;
    if (done < 0) return done;
    if (done) {
      tail++;
      continue;
    }
    int stop = ops->idle ? ops->idle(ops->arg) : 0;
    if (stop) return stop;
  }
  return 0;
}
