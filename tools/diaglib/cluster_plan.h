/*
 * railnet-diag --cluster's plan and verdict, pure functions of their inputs (no I/O):
 *  - the rounds: every pair of n ranks exactly once, in rounds of disjoint pairs (the circle
 *    method), so that a check of N nodes takes O(N) rounds, each pair's check running beside
 *    the others of its round;
 *  - the verdict from the links measured, each in both directions: dead ranks (never joined),
 *    isolated ranks (joined, no link works), broken links (a pair that fails while both ends
 *    work with others), slow senders and slow receivers (most of a rank's outgoing or incoming
 *    directions well below the median of all), slow links (a direction well below it whose
 *    two ends are fine with the others).
 */
#ifndef RAILNET_CLUSTER_PLAN_H
#define RAILNET_CLUSTER_PLAN_H

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_CLUSTER_MAX_RANKS 1024

/* Rounds among n ranks: n - 1 for an even n, n for an odd n (one rank sits each round out). */
int railnetClusterRounds(int n);
/* The pairs of round r (0 <= r < rounds) among ranks[0..n), as ranks (a < b) into pairs;
 * returns how many (at most n / 2, never more than max). */
int railnetClusterRound(const int* ranks, int n, int r, int (*pairs)[2], int max);

/* One link's outcome, both directions of it. */
typedef struct {
  int a, b;        /* ranks */
  int ok;          /* 1: works; 0: fails; -1: no result (a rank died during the check) */
  double mbps;     /* measured bandwidth a -> b, 0 when not measured */
  double usec;     /* the TCP probe from a to b (a round trip), 0 when not measured */
  double mbpsBack; /* b -> a */
  double usecBack; /* the TCP probe from b to a */
} railnetClusterLink;

/* How railnetClusterJudge calls a direction, a rank or a link slow (printed with the verdict). */
#define RAILNET_CLUSTER_SLOW_RULE                                                                             \
  "a direction is slow below the threshold; a rank is a slow sender (receiver) when most of its measured "   \
  "outgoing (incoming) directions, and at least 2, are slow, not counting those a slow receiver (sender) at " \
  "the other end explains, the largest share judged first; a slow link is a slow direction between two "     \
  "ranks that are not slow, from one that sends fast to another to one that receives fast from another"

typedef struct {
  double median;     /* of every measured direction's MB/s (0: none measured) */
  double threshold;  /* slow below this: median x the fraction asked for */
  int slowSenders[RAILNET_CLUSTER_MAX_RANKS], nSlowSenders;     /* ascending */
  int slowReceivers[RAILNET_CLUSTER_MAX_RANKS], nSlowReceivers; /* ascending */
  int slow[RAILNET_CLUSTER_MAX_RANKS], nSlow;                   /* the union of the two, ascending */
  int (*slowLinks)[2], nSlowLinks; /* [from, to] per slow direction; room for 2 x nLinks (malloc'd) */
  int (*broken)[2], nBroken;       /* [a, b]; room for nLinks, up to n (n - 1) / 2 (malloc'd) */
  int dead[RAILNET_CLUSTER_MAX_RANKS], nDead;
  int isolated[RAILNET_CLUSTER_MAX_RANKS], nIsolated;
} railnetClusterVerdict;

/* The verdict on n ranks (alive[r]: rank r joined) from their links; slowFraction in (0, 1]:
 * the threshold is slowFraction x the median of every measured direction, and the rule
 * RAILNET_CLUSTER_SLOW_RULE names the slow senders, receivers and links (so one lucky or
 * unlucky measurement moves no rank, and with two ranks nobody is slow). Dead: not alive;
 * isolated: alive, some link and none working; broken: a failing link whose both ends work
 * with others. v is overwritten: railnetClusterVerdictFree it after (also when nothing could
 * be allocated: then the lists are empty). */
void railnetClusterJudge(int n, const int* alive, const railnetClusterLink* links, int nLinks, double slowFraction,
                         railnetClusterVerdict* v);
void railnetClusterVerdictFree(railnetClusterVerdict* v);

#ifdef __cplusplus
}
#endif
#endif
