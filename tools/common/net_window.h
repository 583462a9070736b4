/*
 * A window of messages through a net plugin's comm, the loop both railnet-perf (its
 * streams) and railnet-diag --pair --bw (its bandwidth figure) run: messages 0 .. n-1 posted
 * in order with at most `window` of them in flight, completed in order. What a message is
 * (one isend, the isends of a grouped receive, an irecv; on which comm; what test() reported)
 * is the caller's, through three callbacks; the loop is the same for both.
 */
#ifndef RAILNET_TOOLS_COMMON_NET_WINDOW_H_
#define RAILNET_TOOLS_COMMON_NET_WINDOW_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  /* Post message k: 0 posted, 1 not taken yet (the transport's queue is full: the loop tests
   * and tries again), < 0 failed (the loop returns it). */
  int (*post)(void* arg, int k);
  /* Has message k completed? 1 yes, 0 not yet, < 0 failed (the loop returns it). */
  int (*test)(void* arg, int k);
  /* Called when the oldest message is not done yet: 0 to go on, else the loop returns it
   * (a deadline passed). May be NULL. */
  int (*idle)(void* arg);
  void* arg;
} netWindowOps;

/* Runs messages 0 .. n-1, at most window (>= 1) in flight; 0 once all completed, else the
 * first failure of post or test, or idle's stop value. */
int netWindowRun(const netWindowOps* ops, int n, int window);

#ifdef __cplusplus
}
#endif
#endif
