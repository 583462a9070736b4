/* railnet-diag --cluster's rounds and verdict (cluster_plan.h). */
#include <stdlib.h>
#include <string.h>
#include "cluster_plan.h"

int railnetClusterRounds(int n) { return n < 2 ? 0 : n % 2 ? n : n - 1; }

int railnetClusterRound(const int* ranks, int n, int r, int (*pairs)[2], int max) {
  if (n < 2 || r < 0 || r >= railnetClusterRounds(n)) return 0;
  int m = n + n % 2; /* with a stand-in rank (index n) that sits out when n is odd */
  int k = 0;
  for (int i = 0; i < m / 2 && k < max; i++) {
    /* position 0 stays, the others turn one step per round */
    int x = i == 0 ? 0 : 1 + (r + i - 1) % (m - 1);
    int y = 1 + (r + m - 2 - i) % (m - 1);
    if (x >= n || y >= n) continue;
    int a = ranks[x], b = ranks[y];
    pairs[k][0] = a < b ? a : b;
    pairs[k][1] = a < b ? b : a;
    k++;
  }
  return k;
}

static int cmpDouble(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

/* One measured direction of a working link. */
typedef struct {
  int from, to;
  double mbps;
} clusterDir;

/* The measured directions of the working links between ranks below n; returns how many. */
static int directions(int n, const railnetClusterLink* links, int nLinks, clusterDir* d) {
  int k = 0;
  for (int i = 0; i < nLinks; i++) {
    const railnetClusterLink* l = &links[i];
    if (l->ok != 1 || l->a < 0 || l->a >= n || l->b < 0 || l->b >= n || l->a == l->b) continue;
    if (l->mbps > 0) d[k++] = (clusterDir){l->a, l->b, l->mbps};
    if (l->mbpsBack > 0) d[k++] = (clusterDir){l->b, l->a, l->mbpsBack};
  }
  return k;
}

static double medianOf(const clusterDir* d, int k) {
  double* v = (double*)malloc(sizeof(double) * (size_t)(k ? k : 1));
  double m = 0;
  if (v && k) {
    for (int i = 0; i < k; i++) v[i] = d[i].mbps;
    qsort(v, (size_t)k, sizeof(double), cmpDouble);
    m = k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
  }
  free(v);
  return m;
}

/* Per rank and role (0 sender, 1 receiver): its measured directions and those below the
 * threshold, not counting those explained by the other end; whether it was judged slow. */
typedef struct {
  int measured[2], below[2];
  int slow[2];
} rankDirs;

/* A role of a rank is a candidate: most of its counted directions, at least 2, are slow. */
static int candidate(const rankDirs* r, int role) {
  return !r->slow[role] && r->below[role] >= 2 && 2 * r->below[role] > r->measured[role];
}

/* The slow senders and receivers, one at a time: the candidate with the largest share of slow
 * directions first (then the most, then the lower rank, senders first); once a rank is a slow
 * receiver its incoming directions no longer count against their senders, and the other way. */
static void judgeRoles(int n, const clusterDir* d, int k, double t, rankDirs* c) {
  memset(c, 0, sizeof(*c) * (size_t)n);
  for (int i = 0; i < k; i++) {
    c[d[i].from].measured[0]++, c[d[i].to].measured[1]++;
    if (d[i].mbps < t) c[d[i].from].below[0]++, c[d[i].to].below[1]++;
  }
  for (;;) {
    int best = -1, role = 0;
    for (int r = 0; r < n; r++)
      for (int o = 0; o < 2; o++) {
        if (!candidate(&c[r], o)) continue;
        if (best < 0) {
          best = r, role = o;
          continue;
        }
        /* share below: below / measured, compared without division */
        long lhs = (long)c[r].below[o] * c[best].measured[role], rhs = (long)c[best].below[role] * c[r].measured[o];
        if (lhs > rhs || (lhs == rhs && c[r].below[o] > c[best].below[role])) best = r, role = o;
      }
    if (best < 0) return;
    c[best].slow[role] = 1;
    for (int i = 0; i < k; i++) { /* what this rank explains no longer counts at the other end */
      int self = role ? d[i].to : d[i].from, other = role ? d[i].from : d[i].to;
      if (self != best || other == best) continue;
      c[other].measured[1 - role]--;
      if (d[i].mbps < t) c[other].below[1 - role]--;
    }
  }
}

/* Per rank: its working and failing links. */
static void countLinks(int n, const railnetClusterLink* links, int nLinks, int* ok, int* failed) {
  memset(ok, 0, sizeof(int) * (size_t)n);
  memset(failed, 0, sizeof(int) * (size_t)n);
  for (int i = 0; i < nLinks; i++) {
    const railnetClusterLink* l = &links[i];
    if (l->a < 0 || l->a >= n || l->b < 0 || l->b >= n) continue;
    if (l->ok == 1) ok[l->a]++, ok[l->b]++;
    if (l->ok == 0) failed[l->a]++, failed[l->b]++;
  }
}

/* The failing links whose both ends work with others; the slow directions between two ranks
 * that are fine with the others: neither a slow sender nor a slow receiver (a slow rank's
 * other direction is suspect too: its acknowledgements and credits travel it), the sender
 * sending fast to another rank and the receiver receiving fast from another (with two ranks
 * there is nobody to compare with). fast: 2n. */
static void judgeLinks(int n, const railnetClusterLink* links, int nLinks, const int* ok, const clusterDir* d, int k,
                       const rankDirs* c, int* fast, railnetClusterVerdict* v) {
  memset(fast, 0, sizeof(int) * 2 * (size_t)n);
  for (int i = 0; i < k; i++)
    if (d[i].mbps >= v->threshold) fast[2 * d[i].from]++, fast[2 * d[i].to + 1]++;
  for (int i = 0; v->broken && i < nLinks; i++) {
    const railnetClusterLink* l = &links[i];
    if (l->ok != 0 || l->a < 0 || l->a >= n || l->b < 0 || l->b >= n) continue;
    if (ok[l->a] > 0 && ok[l->b] > 0) {
      v->broken[v->nBroken][0] = l->a;
      v->broken[v->nBroken][1] = l->b;
      v->nBroken++;
    }
  }
  for (int i = 0; v->slowLinks && i < k; i++) {
    const rankDirs *f = &c[d[i].from], *t = &c[d[i].to];
    if (d[i].mbps >= v->threshold || f->slow[0] || f->slow[1] || t->slow[0] || t->slow[1]) continue;
    if (fast[2 * d[i].from] == 0 || fast[2 * d[i].to + 1] == 0) continue;
    v->slowLinks[v->nSlowLinks][0] = d[i].from;
    v->slowLinks[v->nSlowLinks][1] = d[i].to;
    v->nSlowLinks++;
  }
}

void railnetClusterJudge(int n, const int* alive, const railnetClusterLink* links, int nLinks, double slowFraction,
                         railnetClusterVerdict* v) {
  memset(v, 0, sizeof(*v));
  if (n > RAILNET_CLUSTER_MAX_RANKS) n = RAILNET_CLUSTER_MAX_RANKS;
  if (n < 0 || nLinks < 0) return;
  size_t nl = (size_t)(nLinks ? nLinks : 1);
  v->broken = (int(*)[2])malloc(sizeof(*v->broken) * nl);
  v->slowLinks = (int(*)[2])malloc(sizeof(*v->slowLinks) * 2 * nl);
  clusterDir* d = (clusterDir*)malloc(sizeof(*d) * 2 * nl);
  rankDirs* c = (rankDirs*)malloc(sizeof(*c) * (size_t)(n ? n : 1));
  int* ok = (int*)malloc(sizeof(int) * 4 * (size_t)(n ? n : 1)); /* ok, failed, fast (2 per rank) */
  if (d == NULL || c == NULL || ok == NULL) goto out;
  int* failed = ok + n;
  int k = directions(n, links, nLinks, d);
  v->median = medianOf(d, k);
  v->threshold = v->median * slowFraction;
  countLinks(n, links, nLinks, ok, failed);
  judgeRoles(n, d, k, v->threshold, c);
  for (int r = 0; r < n; r++) {
    if (!alive[r]) v->dead[v->nDead++] = r;
    else if (ok[r] == 0 && failed[r] > 0) v->isolated[v->nIsolated++] = r;
    if (c[r].slow[0]) v->slowSenders[v->nSlowSenders++] = r;
    if (c[r].slow[1]) v->slowReceivers[v->nSlowReceivers++] = r;
    if (c[r].slow[0] || c[r].slow[1]) v->slow[v->nSlow++] = r;
  }
  judgeLinks(n, links, nLinks, ok, d, k, c, ok + 2 * n, v);
out:
  free(d);
  free(c);
  free(ok);
}

void railnetClusterVerdictFree(railnetClusterVerdict* v) {
  free(v->broken);
  free(v->slowLinks);
  v->broken = v->slowLinks = NULL;
  v->nBroken = v->nSlowLinks = 0;
}
