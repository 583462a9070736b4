/*
 * railnet-diag --cluster's plan and verdict, pure functions of their inputs (no I/O):
 *  - the rounds: every pair of n ranks exactly once, in rounds of disjoint pairs (the circle
 *    method), so that a check of N nodes takes O(N) rounds, each pair's check running beside
 *    the others of its round;
 *  - the verdict from the links measured: dead ranks (never joined), isolated ranks (joined,
 *    no link works), broken links (a pair that fails while both ends work with others), slow
 *    ranks (every link of the rank well below the median of all links).
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

/* One link's outcome. */
typedef struct {
  int a, b;        /* ranks */
  int ok;          /* 1: works; 0: fails; -1: no result (a rank died during the check) */
  double mbps;     /* measured bandwidth, 0 when not measured */
  double usec;     /* one round trip, 0 when not measured */
} railnetClusterLink;

typedef struct {
  double median;     /* of the working links' MB/s (0: none measured) */
  double threshold;  /* slow below this: median x the fraction asked for */
  int slow[RAILNET_CLUSTER_MAX_RANKS], nSlow;
  int broken[RAILNET_CLUSTER_MAX_RANKS][2], nBroken;
  int dead[RAILNET_CLUSTER_MAX_RANKS], nDead;
  int isolated[RAILNET_CLUSTER_MAX_RANKS], nIsolated;
} railnetClusterVerdict;

/* The verdict on n ranks (alive[r]: rank r joined) from their links; slowFraction in (0, 1]:
 * a rank is slow when every one of its measured working links is below slowFraction x the
 * median (a rank needs a link to two others for that: with two ranks nobody is slow). */
void railnetClusterJudge(int n, const int* alive, const railnetClusterLink* links, int nLinks, double slowFraction,
                         railnetClusterVerdict* v);

#ifdef __cplusplus
}
#endif
#endif
