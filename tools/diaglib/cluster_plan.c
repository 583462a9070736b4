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

static double medianOf(const railnetClusterLink* links, int nLinks) {
  double* v = (double*)malloc(sizeof(double) * (size_t)(nLinks ? nLinks : 1));
  int k = 0;
  for (int i = 0; v && i < nLinks; i++)
    if (links[i].ok == 1 && links[i].mbps > 0) v[k++] = links[i].mbps;
  double m = 0;
  if (k) {
    qsort(v, (size_t)k, sizeof(double), cmpDouble);
    m = k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
  }
  free(v);
  return m;
}

/* Per rank: its working links, failing links, measured links and measured links below t. */
typedef struct {
  int ok, failed, measured, below;
} rankLinks;

static void countLinks(int n, const railnetClusterLink* links, int nLinks, double t, rankLinks* c) {
  memset(c, 0, sizeof(*c) * (size_t)n);
  for (int i = 0; i < nLinks; i++) {
    const railnetClusterLink* l = &links[i];
    if (l->a < 0 || l->a >= n || l->b < 0 || l->b >= n) continue;
    int ends[2] = {l->a, l->b};
    for (int e = 0; e < 2; e++) {
      rankLinks* r = &c[ends[e]];
      if (l->ok == 1) r->ok++;
      if (l->ok == 0) r->failed++;
      if (l->ok == 1 && l->mbps > 0) {
        r->measured++;
        r->below += l->mbps < t;
      }
    }
  }
}

void railnetClusterJudge(int n, const int* alive, const railnetClusterLink* links, int nLinks, double slowFraction,
                         railnetClusterVerdict* v) {
  memset(v, 0, sizeof(*v));
  if (n > RAILNET_CLUSTER_MAX_RANKS) n = RAILNET_CLUSTER_MAX_RANKS;
  v->median = medianOf(links, nLinks);
  v->threshold = v->median * slowFraction;
  rankLinks* c = (rankLinks*)malloc(sizeof(rankLinks) * (size_t)(n ? n : 1));
  if (c == NULL) return;
  countLinks(n, links, nLinks, v->threshold, c);
  for (int r = 0; r < n; r++) {
    if (!alive[r]) v->dead[v->nDead++] = r;
    else if (c[r].ok == 0 && c[r].failed > 0) v->isolated[v->nIsolated++] = r;
    else if (c[r].measured >= 2 && c[r].below == c[r].measured) v->slow[v->nSlow++] = r;
  }
  for (int i = 0; i < nLinks; i++) {
    const railnetClusterLink* l = &links[i];
    if (l->ok != 0 || l->a < 0 || l->a >= n || l->b < 0 || l->b >= n) continue;
    if (c[l->a].ok > 0 && c[l->b].ok > 0) {
      v->broken[v->nBroken][0] = l->a;
      v->broken[v->nBroken][1] = l->b;
      v->nBroken++;
    }
  }
  free(c);
}
