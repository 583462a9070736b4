/* railnet-diag --cluster's report (cluster.h), by rank 0: the ranks, every link (result,
 * MB/s, time, path, and for a failing one the cause and the fix the pair check gives), the
 * bandwidth matrix, and the verdict: dead ranks (never came, or went away), isolated ranks,
 * broken links, slow ranks, each a PROBLEM with its fix. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include "cluster.h"
#include "diag.h"

static const char* hostOf(const clusterRun* run, int r) {
  return run->ranks[r].joined ? run->ranks[r].join.host : "?";
}

static void rankRows(const clusterRun* run) {
  jOpen("ranks", '[');
  for (int r = 0; r < run->o->size; r++) {
    const clusterRank* k = &run->ranks[r];
    char a[INET6_ADDRSTRLEN] = "";
    if (k->joined && k->family) railnetPairAddrString(k->family, k->addr, a, sizeof(a));
    text("  rank %-4d %-24s %-16s %s\n", r, hostOf(run, r), a, !k->joined ? "never came" : k->alive ? "" : "went away");
    jOpen(NULL, '{');
    jInt("rank", r);
    jStr("host", k->joined ? k->join.host : NULL);
    jStr("address", k->joined ? a : NULL);
    jBool("joined", k->joined);
    jBool("alive", k->alive);
    jClose('}');
  }
  jClose(']');
}

/* Links of ranks that went away have no result (-1), whatever the check said. */
static railnetClusterLink* judgedLinks(const clusterRun* run) {
  railnetClusterLink* l = (railnetClusterLink*)calloc((size_t)run->nLinks + 1, sizeof(*l));
  for (int i = 0; l && i < run->nLinks; i++) {
    const railnetClusterLinkMsg* m = &run->links[i];
    int gone = !run->ranks[m->a].alive || !run->ranks[m->b].alive;
    l[i] = (railnetClusterLink){(int)m->a, (int)m->b, gone ? -1 : m->ok, m->kbps / 1000.0, (double)m->usec};
  }
  return l;
}

static void linkRows(const clusterRun* run, const railnetClusterLink* l) {
  text("\n  %-5s %-5s %-8s %10s %9s  %s\n", "rank", "rank", "result", "MB/s", "usec", "path / cause");
  jOpen("links", '[');
  for (int i = 0; i < run->nLinks; i++) {
    const railnetClusterLinkMsg* m = &run->links[i];
    const char* res = l[i].ok == 1 ? "ok" : l[i].ok == 0 ? "FAIL" : "no result";
    text("  %-5u %-5u %-8s %10.1f %9u  %s\n", m->a, m->b, res, l[i].mbps, m->usec, m->ok ? m->path : m->cause);
    jOpen(NULL, '{');
    jInt("a", m->a);
    jInt("b", m->b);
    jStr("path", m->path);
    jStr("result", res);
    jFixed("MBps", l[i].mbps, 1);
    jInt("usec", m->usec);
    if (!m->ok) jStr("cause", m->cause), jStr("fix", m->fix);
    jClose('}');
  }
  jClose(']');
}

static const railnetClusterLinkMsg* linkOf(const clusterRun* run, int a, int b) {
  for (int i = 0; i < run->nLinks; i++)
    if (((int)run->links[i].a == a && (int)run->links[i].b == b) || ((int)run->links[i].a == b && (int)run->links[i].b == a))
      return &run->links[i];
  return NULL;
}

/* The links as a matrix of MB/s (text only, up to 16 ranks: the list above has them all). */
static void matrix(const clusterRun* run, const railnetClusterLink* l) {
  int n = run->o->size;
  if (n > 16) return;
  text("\n  MB/s  ");
  for (int b = 0; b < n; b++) text("%7d", b);
  text("\n");
  for (int a = 0; a < n; a++) {
    text("  %4d  ", a);
    for (int b = 0; b < n; b++) {
      int k = -1;
      for (int i = 0; i < run->nLinks; i++)
        if (((int)run->links[i].a == a && (int)run->links[i].b == b) || ((int)run->links[i].a == b && (int)run->links[i].b == a))
          k = i;
      if (a == b || k < 0) text("%7s", a == b ? "" : "-");
      else if (l[k].ok != 1) text("%7s", l[k].ok == 0 ? "FAIL" : "?");
      else text("%7.0f", l[k].mbps);
    }
    text("\n");
  }
}

static void verdict(const clusterRun* run, const railnetClusterVerdict* v) {
  jOpen("verdict", '{');
  jOpen("slow_ranks", '[');
  for (int i = 0; i < v->nSlow; i++) {
    jInt(NULL, v->slow[i]);
    PROBLEM("check that rank's NIC speed and link (ethtool, the switch port), its traffic shaping (tc) and "
            "CPU load; railnet-diag on that node shows its ports and counters",
            "rank %d (%s) is slow: every link of it is below %.1f MB/s (%.2f x the median %.1f MB/s of all links)",
            v->slow[i], hostOf(run, v->slow[i]), v->threshold, CLUSTER_SLOW_FRACTION, v->median);
  }
  jClose(']');
  jOpen("broken_links", '[');
  for (int i = 0; i < v->nBroken; i++) {
    int a = v->broken[i][0], b = v->broken[i][1];
    const railnetClusterLinkMsg* m = linkOf(run, a, b);
    jOpen(NULL, '[');
    jInt(NULL, a);
    jInt(NULL, b);
    jClose(']');
    PROBLEM(m && m->fix[0] ? m->fix : "run railnet-diag --pair between the two nodes",
            "the link between rank %d (%s) and rank %d (%s) fails while both work with the others: %s", a,
            hostOf(run, a), b, hostOf(run, b), m ? m->cause : "no result");
  }
  jClose(']');
  jOpen("dead_ranks", '[');
  for (int i = 0; i < v->nDead; i++) {
    int r = v->dead[i];
    jInt(NULL, r);
    PROBLEM("check that the launcher started it and that it reaches the rendezvous (host, port, firewall)",
            "rank %d%s%s%s %s", r, run->ranks[r].joined ? " (" : "", run->ranks[r].joined ? run->ranks[r].join.host : "",
            run->ranks[r].joined ? ")" : "",
            run->ranks[r].joined ? "went away during the check" : "never came to the rendezvous");
  }
  jClose(']');
  jOpen("isolated_ranks", '[');
  for (int i = 0; i < v->nIsolated; i++) {
    jInt(NULL, v->isolated[i]);
    PROBLEM("run railnet-diag on that node: its interfaces, ports and the settings it needs",
            "rank %d (%s) came but works with no other rank", v->isolated[i], hostOf(run, v->isolated[i]));
  }
  jClose(']');
  jFixed("median_MBps", v->median, 1);
  jFixed("slow_below_MBps", v->threshold, 1);
  jClose('}');
}

int clusterReport(const clusterRun* run) {
  section("cluster", "Cluster check");
  text("  %d ranks%s%s, rendezvous %s; %d rounds\n", run->o->size, run->o->launcher ? " from " : "",
       run->o->launcher ? run->o->launcher : "", run->o->rendezvous, run->rounds);
  jStr("rendezvous", run->o->rendezvous);
  jStr("launcher", run->o->launcher);
  jInt("size", run->o->size);
  jInt("rounds", run->rounds);
  jFixed("bound_s", run->boundS, 0);
  rankRows(run);
  railnetClusterLink* l = judgedLinks(run);
  if (l == NULL) return 1;
  linkRows(run, l);
  matrix(run, l);
  int* alive = (int*)calloc((size_t)run->o->size, sizeof(int));
  for (int r = 0; alive && r < run->o->size; r++) alive[r] = run->ranks[r].alive;
  railnetClusterVerdict* v = (railnetClusterVerdict*)calloc(1, sizeof(*v));
  if (alive && v) {
    railnetClusterJudge(run->o->size, alive, l, run->nLinks, CLUSTER_SLOW_FRACTION, v);
    text("\n");
    verdict(run, v);
  }
  free(v);
  free(alive);
  free(l);
  return 0;
}
