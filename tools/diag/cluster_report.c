/* railnet-diag --cluster's report (cluster.h), by rank 0: the ranks, every link (result,
 * MB/s and probe time each way, path, and for a failing one the cause and the fix the pair
 * check gives), the bandwidth matrix (from the row's rank to the column's), and the verdict:
 * dead ranks (never came, or went away), isolated ranks, broken links, slow senders, slow
 * receivers and slow links, each a PROBLEM with what it means and what to check. */
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
railnetClusterLink* clusterJudgedLinks(const clusterRun* run) {
  railnetClusterLink* l = (railnetClusterLink*)calloc((size_t)run->nLinks + 1, sizeof(*l));
  for (int i = 0; l && i < run->nLinks; i++) {
    const railnetClusterLinkMsg* m = &run->links[i];
    int gone = !run->ranks[m->a].alive || !run->ranks[m->b].alive;
    l[i] = (railnetClusterLink){(int)m->a,       (int)m->b, gone ? -1 : m->ok, m->kbps / 1000.0, (double)m->usec,
                                m->kbpsBack / 1000.0, (double)m->usecBack};
  }
  return l;
}

/* "123.4", or "-" when that direction was not measured. */
static const char* rate(double mbps, char* buf, size_t size) {
  if (mbps > 0) sfmt(buf, size, "%.1f", mbps);
  else sfmt(buf, size, "-");
  return buf;
}

static void linkRows(const clusterRun* run, const railnetClusterLink* l) {
  text("\n  %-5s %-5s %-9s %10s %10s %9s %9s  %s\n", "a", "b", "result", "a->b MB/s", "b->a MB/s", "a->b usec",
       "b->a usec", "path (a <-> b) / cause");
  jOpen("links", '[');
  for (int i = 0; i < run->nLinks; i++) {
    const railnetClusterLinkMsg* m = &run->links[i];
    const char* res = l[i].ok == 1 ? "ok" : l[i].ok == 0 ? "FAIL" : "no result";
    char path[200] = "", ab[32], ba[32], best[32] = "";
    if (m->net[0]) sfmt(path, sizeof(path), "%s %s <-> %s", m->net, m->devA, m->devB);
    int times = run->times ? run->times[i] : 1;
    if (times > 1) sfmt(best, sizeof(best), " (best of %d)", times);
    text("  %-5u %-5u %-9s %10s %10s %9u %9u  %s%s\n", m->a, m->b, res, rate(l[i].mbps, ab, sizeof(ab)),
         rate(l[i].mbpsBack, ba, sizeof(ba)), m->usec, m->usecBack, m->ok ? path : m->cause, m->ok ? best : "");
    jOpen(NULL, '{');
    jInt("a", m->a);
    jInt("b", m->b);
    jStr("path", path);
    jStr("net", m->net[0] ? m->net : NULL);
    jStr("a_dev", m->devA[0] ? m->devA : NULL);
    jStr("b_dev", m->devB[0] ? m->devB : NULL);
    jStr("result", res);
    jFixed("a_to_b_MBps", l[i].mbps, 1);
    jFixed("b_to_a_MBps", l[i].mbpsBack, 1);
    jInt("a_to_b_usec", m->usec);
    jInt("b_to_a_usec", m->usecBack);
    jInt("measurements", times);
    jFixed("MBps", l[i].mbps, 1); /* a -> b, as before both directions were measured */
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

/* The measured MB/s from rank `from` to rank `to` (0: none), and the link's index (-1: none). */
static double rateOf(const clusterRun* run, const railnetClusterLink* l, int from, int to, int* idx) {
  *idx = -1;
  for (int i = 0; i < run->nLinks; i++) {
    if (l[i].a == from && l[i].b == to) return *idx = i, l[i].mbps;
    if (l[i].a == to && l[i].b == from) return *idx = i, l[i].mbpsBack;
  }
  return 0;
}

/* The links as a matrix of MB/s from the row's rank to the column's (text only, up to 16
 * ranks: the list above has them all). */
static void matrix(const clusterRun* run, const railnetClusterLink* l) {
  int n = run->o->size;
  if (n > 16) return;
  text("\n  MB/s from the row's rank to the column's\n  from\\to");
  for (int b = 0; b < n; b++) text("%7d", b);
  text("\n");
  for (int a = 0; a < n; a++) {
    text("  %6d ", a);
    for (int b = 0; b < n; b++) {
      int k;
      double mbps = rateOf(run, l, a, b, &k);
      if (a == b || k < 0) text("%7s", a == b ? "" : "-");
      else if (l[k].ok != 1) text("%7s", l[k].ok == 0 ? "FAIL" : "?");
      else if (mbps <= 0) text("%7s", "-");
      else text("%7.0f", mbps);
    }
    text("\n");
  }
}

/* What to check on rank r's port (role 0: its transmit side, 1: its receive side), on the
 * device its links were measured on. */
static void portChecks(const clusterRun* run, int r, int role, char* buf, size_t size) {
  const railnetClusterLinkMsg* m = NULL;
  for (int i = 0; i < run->nLinks && m == NULL; i++)
    if (run->links[i].net[0] && ((int)run->links[i].a == r || (int)run->links[i].b == r)) m = &run->links[i];
  const char* host = hostOf(run, r);
  if (m == NULL) {
    sfmt(buf, size, "on %s: ethtool -S and rdma statistic on its ports, then their cables and transceivers", host);
    return;
  }
  char dev[64];
  sfmt(dev, sizeof(dev), "%s", (int)m->a == r ? m->devA : m->devB);
  const char* tx = role ? "receive" : "transmit";
  if (strcmp(m->net, "ib") == 0) {
    char* colon = strrchr(dev, ':');
    const char* port = colon ? colon + 1 : "1";
    if (colon) *colon = '\0';
    sfmt(buf, size,
         "on %s, RDMA device %s port %s: rdma statistic show link %s/%s and ethtool -S of its netdev (%s errors, "
         "drops, pause/PFC counters growing during a transfer), ibv_devinfo -d %s (the port's rate); ib_write_bw -d %s "
         "-i %s %s a good node; then the cable and transceiver of that port and its switch port",
         host, dev, port, dev, port, tx, dev, dev, port, role ? "from" : "to");
  } else {
    sfmt(buf, size,
         "on %s, interface %s: ethtool -S %s (%s errors, drops, pause/PFC counters growing during a transfer), "
         "ethtool %s (speed), tc qdisc show dev %s; railnet-perf or iperf3 %s a good node; then the cable and "
         "transceiver of %s and its switch port",
         host, dev, dev, tx, dev, dev, role ? "from" : "to", dev);
  }
}

static void slowRanks(const clusterRun* run, const railnetClusterLink* l, const railnetClusterVerdict* v, int role) {
  jOpen(role ? "slow_receivers" : "slow_senders", '[');
  int n = role ? v->nSlowReceivers : v->nSlowSenders;
  for (int i = 0; i < n; i++) {
    int r = role ? v->slowReceivers[i] : v->slowSenders[i], measured = 0, below = 0, k;
    jInt(NULL, r);
    for (int p = 0; p < run->o->size; p++) {
      double mbps = p == r ? 0 : role ? rateOf(run, l, p, r, &k) : rateOf(run, l, r, p, &k);
      if (mbps > 0) measured++, below += mbps < v->threshold;
    }
    char fix[1024];
    portChecks(run, r, role, fix, sizeof(fix));
    PROBLEM(fix,
            "rank %d (%s) %s slowly: %d of the %d directions %s it below %.1f MB/s (%.2f x the median %.1f MB/s): its "
            "%s side is degraded (%s)",
            r, hostOf(run, r), role ? "receives" : "sends", below, measured, role ? "into" : "out of", v->threshold,
            CLUSTER_SLOW_FRACTION, v->median, role ? "receive" : "transmit",
            role ? "a bad cable or transceiver lane towards it, its switch port's egress (pauses, drops, a shaper), "
                   "receive drops on the node"
                 : "a bad cable or transceiver lane, pause frames from its switch port, a stuck transmit queue, a "
                   "shaper on the node");
  }
  jClose(']');
}

static void slowLinks(const clusterRun* run, const railnetClusterLink* l, const railnetClusterVerdict* v) {
  jOpen("slow_links", '[');
  for (int i = 0; i < v->nSlowLinks; i++) {
    int f = v->slowLinks[i][0], t = v->slowLinks[i][1], both = 0, earlier = 0, k;
    jOpen(NULL, '[');
    jInt(NULL, f);
    jInt(NULL, t);
    jClose(']');
    for (int j = 0; j < v->nSlowLinks; j++)
      if (v->slowLinks[j][0] == t && v->slowLinks[j][1] == f) both = 1, earlier = j < i;
    if (earlier) continue; /* one finding for a pair slow both ways */
    double ft = rateOf(run, l, f, t, &k), tf = rateOf(run, l, t, f, &k);
    const railnetClusterLinkMsg* m = linkOf(run, f, t);
    int ib = m && strcmp(m->net, "ib") == 0;
    const char* df = m ? ((int)m->a == f ? m->devA : m->devB) : "?";
    const char* dt = m ? ((int)m->a == f ? m->devB : m->devA) : "?";
    char fix[1024];
    sfmt(fix, sizeof(fix),
         "%s both ways between %s (%s) and %s (%s); %s on both ports; then the cables, transceivers and the switch "
         "path between them (an ECMP hash or a route that sends this pair another way)",
         ib ? "ib_write_bw" : "railnet-perf or iperf3", hostOf(run, f), df, hostOf(run, t), dt,
         ib ? "rdma statistic and ethtool -S" : "ethtool -S");
    PROBLEM(fix,
            "the link from rank %d (%s) to rank %d (%s) is slow %s: %.1f MB/s, %.1f MB/s back (below %.1f MB/s) "
            "while both are fine with the others: a bad cable or a misrouted path between the two (%s %s <-> %s)",
            f, hostOf(run, f), t, hostOf(run, t), both ? "both ways" : "that way", ft, tf, v->threshold,
            m ? m->net : "?", df, dt);
  }
  jClose(']');
}

static void verdict(const clusterRun* run, const railnetClusterLink* l, const railnetClusterVerdict* v) {
  text("  slow: below %.1f MB/s (%.2f x the median %.1f MB/s of every measured direction); %s\n", v->threshold,
       CLUSTER_SLOW_FRACTION, v->median, RAILNET_CLUSTER_SLOW_RULE);
  jOpen("verdict", '{');
  jOpen("slow_ranks", '['); /* senders and receivers together */
  for (int i = 0; i < v->nSlow; i++) jInt(NULL, v->slow[i]);
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
  slowRanks(run, l, v, 0);
  slowRanks(run, l, v, 1);
  slowLinks(run, l, v);
  jFixed("median_MBps", v->median, 1);
  jFixed("slow_below_MBps", v->threshold, 1);
  jFixed("slow_fraction", CLUSTER_SLOW_FRACTION, 2);
  jStr("slow_rule", RAILNET_CLUSTER_SLOW_RULE);
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
  railnetClusterLink* l = clusterJudgedLinks(run);
  if (l == NULL) return 1;
  linkRows(run, l);
  matrix(run, l);
  int* alive = (int*)calloc((size_t)run->o->size, sizeof(int));
  for (int r = 0; alive && r < run->o->size; r++) alive[r] = run->ranks[r].alive;
  railnetClusterVerdict* v = (railnetClusterVerdict*)calloc(1, sizeof(*v));
  if (alive && v) {
    railnetClusterJudge(run->o->size, alive, l, run->nLinks, CLUSTER_SLOW_FRACTION, v);
    text("\n");
    verdict(run, l, v);
    railnetClusterVerdictFree(v);
  }
  free(v);
  free(alive);
  free(l);
  return 0;
}
