/* railnet-diag --pair's RDMA report: one row per port x GID path (works, or where it failed:
 * here, on the peer, or in which direction, with the step, errno and hint), which local port
 * reaches which remote port (the rails), the problems with the chosen GIDs, and the
 * NCCL_IB_HCA / NCCL_IB_GID_INDEX values that work. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include "diag.h"
#include "pair.h"

int pairRdmaPathOk(const pairRdmaPath* p) {
  return p->tried && p->setupErr == 0 && p->out[0].step == 0 && p->out[1].step == 0 && p->out[1].bytes &&
         p->in.step == 0 && p->in.bytes;
}
static int chosenPath(const pairState* st, const pairRdmaPath* p) {
  return (st->lr[p->local].isAuto & RAILNET_PAIR_GID_CHOSEN) && (st->rr[p->remote].isAuto & RAILNET_PAIR_GID_CHOSEN);
}

/* Where and how p failed: "QP to RTR here: No data available (errno 61)"; also its step and errno. */
static void pathFailure(const pairRdmaPath* p, char* buf, size_t size, int* step, int* err) {
  const railnetPairRdmaResult* r = NULL;
  const char* where = "";
  if (!p->tried) {
    *step = RAILNET_PAIR_RDMA_PEER, *err = ECANCELED;
    sfmt(buf, size, "not tried (the conversation with the peer stopped)");
    return;
  }
  if (p->setupErr) {
    *step = p->setupStep, *err = p->setupErr;
    sfmt(buf, size, "%s %s: %s (errno %d)", railnetPairRdmaStepName(p->setupStep), p->setupPeer ? "on the peer" : "here",
         strerror(p->setupErr), p->setupErr);
    return;
  }
  if (p->out[0].step) r = &p->out[0], where = "here -> peer";
  else if (p->out[1].step) r = &p->out[1], where = "here -> peer";
  else r = &p->in, where = "peer -> here";
  *step = r->step, *err = r->err;
  if (r->step == 0) {
    *step = RAILNET_PAIR_RDMA_PEER, *err = EPROTO;
    sfmt(buf, size, "the peer's result did not come back");
    return;
  }
  sfmt(buf, size, "%s %s (%u B): %s (%s)", railnetPairRdmaStepName(r->step), where, r->bytes, r->why,
       strerror(r->err));
}

static void gidText(const railnetPairRdmaEntry* e, char* buf, size_t size) {
  char g[INET6_ADDRSTRLEN] = "";
  static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (memcmp(e->gid, pre, 12) == 0) inet_ntop(AF_INET, e->gid + 12, g, sizeof(g));
  else inet_ntop(AF_INET6, e->gid, g, sizeof(g));
  const char* mark = e->isAuto & RAILNET_PAIR_GID_FORCED ? " *forced" : e->isAuto ? " *" : "";
  if (e->roceVer)
    sfmt(buf, size, "%s:%u gid %d v%d %s%s", e->dev, e->port, e->gidIndex, e->roceVer, g, mark);
  else
    sfmt(buf, size, "%s:%u gid %d %s%s", e->dev, e->port, e->gidIndex,
         e->linkLayer == IBV_LINK_LAYER_ETHERNET ? "empty" : "IB", mark);
}

static void jEntry(const char* key, const railnetPairRdmaEntry* e) {
  jOpen(key, '{');
  jStr("device", e->dev);
  jInt("port", e->port);
  jInt("gid_index", e->gidIndex);
  jInt("roce_version", e->roceVer);
  jBool("chosen", (e->isAuto & RAILNET_PAIR_GID_CHOSEN) != 0);
  jBool("forced", (e->isAuto & RAILNET_PAIR_GID_FORCED) != 0);
  jInt("mtu", e->mtu);
  jClose('}');
}

/* One RDMA write + read back as JSON (a probe that did not run: nothing). */
static void jProbe(const char* direction, const railnetPairRdmaResult* r) {
  if (r->bytes == 0 && r->step == 0) return;
  jOpen(NULL, '{');
  jStr("direction", direction);
  jInt("bytes", (long long)r->bytes);
  jBool("ok", r->step == 0);
  if (r->step) {
    jStr("step", railnetPairRdmaStepName(r->step));
    jInt("errno", r->err);
    jStr("error", r->why);
  } else {
    jNum("ms", r->usec / 1000.0);
  }
  jClose('}');
}

static void rdmaRow(const pairState* st, const pairRdmaPath* p) {
  char a[128], b[128], why[256] = "";
  gidText(&st->lr[p->local], a, sizeof(a));
  gidText(&st->rr[p->remote], b, sizeof(b));
  int ok = pairRdmaPathOk(p), step = 0, err = 0;
  if (!ok) pathFailure(p, why, sizeof(why), &step, &err);
  if (ok)
    text("  %-36s %-36s ok (%.1f ms here -> peer, %.1f ms back)\n", a, b, (p->out[0].usec + p->out[1].usec) / 1000.0,
         p->in.usec / 1000.0);
  else
    text("  %-36s %-36s FAIL %s\n      hint: %s\n", a, b, why, railnetPairRdmaHint(step, err));
  jOpen(NULL, '{');
  jEntry("here", &st->lr[p->local]);
  jEntry("peer", &st->rr[p->remote]);
  jBool("chosen", chosenPath(st, p));
  jBool("ok", ok);
  if (!ok) {
    jStr("failure", why);
    jStr("step", railnetPairRdmaStepName(step));
    jInt("errno", err);
    jStr("hint", railnetPairRdmaHint(step, err));
  } else {
    jNum("ms_here_to_peer", (p->out[0].usec + p->out[1].usec) / 1000.0);
    jNum("ms_peer_to_here", p->in.usec / 1000.0);
  }
  /* every probe: this side's small and 1 MiB write + read, and the peer's report of its own */
  jOpen("probes", '[');
  jProbe("here_to_peer", &p->out[0]);
  jProbe("here_to_peer", &p->out[1]);
  jProbe("peer_to_here", &p->in);
  jClose(']');
  jClose('}');
}

static int samePort(const railnetPairRdmaEntry* a, const railnetPairRdmaEntry* b) {
  return a->port == b->port && !strcmp(a->dev, b->dev);
}

/* Which remote ports each local port reaches (any GID). */
static void rails(const pairState* st) {
  jOpen("rails", '[');
  for (int i = 0; i < st->nLr; i++) {
    int first = 1;
    for (int k = 0; k < i && first; k++) first = !samePort(&st->lr[k], &st->lr[i]);
    if (!first) continue;
    char reach[512] = "";
    size_t len = 0;
    for (int j = 0; j < st->nRr; j++) {
      int dup = 0, ok = 0;
      for (int k = 0; k < j; k++) dup |= samePort(&st->rr[k], &st->rr[j]);
      for (int q = 0; q < st->nPaths && !dup && !ok; q++)
        ok = pairRdmaPathOk(&st->paths[q]) && samePort(&st->lr[st->paths[q].local], &st->lr[i]) &&
             samePort(&st->rr[st->paths[q].remote], &st->rr[j]);
      if (ok && len < sizeof(reach))
        len += (size_t)sfmt(reach + len, sizeof(reach) - len, "%s%s:%u", len ? ", " : "", st->rr[j].dev, st->rr[j].port);
    }
    text("  rail: %s:%u here reaches %s\n", st->lr[i].dev, st->lr[i].port, reach[0] ? reach : "no port of the peer");
    jOpen(NULL, '{');
    jStr("here", st->lr[i].dev);
    jInt("port", st->lr[i].port);
    jStr("reaches", reach);
    jClose('}');
  }
  jClose(']');
}

static const railnetPairRdmaEntry* sideEntry(const pairState* st, int side, const pairRdmaPath* p) {
  return side ? &st->rr[p->remote] : &st->lr[p->local];
}

/* Is entry e (of side) part of any path that works? */
static int entryWorks(const pairState* st, int side, const railnetPairRdmaEntry* e) {
  for (int q = 0; q < st->nPaths; q++)
    if (sideEntry(st, side, &st->paths[q]) == e && pairRdmaPathOk(&st->paths[q])) return 1;
  return 0;
}

/* Does a chosen-chosen path from e's port work (or is there none)? Else *fail is the first. */
static int chosenWorks(const pairState* st, int side, const railnetPairRdmaEntry* e, int* fail) {
  int any = 0;
  *fail = -1;
  for (int q = 0; q < st->nPaths; q++) {
    const pairRdmaPath* p = &st->paths[q];
    if (!samePort(sideEntry(st, side, p), e) || !chosenPath(st, p)) continue;
    any = 1;
    if (pairRdmaPathOk(p)) return 1;
    if (*fail < 0) *fail = q;
  }
  return !any;
}

/* The chosen GID of a port of side (0 here, 1 peer) and the peer's chosen GID do not work
 * together: one PROBLEM per failing path, told by the side whose GID reaches nothing (both
 * reach nothing: this side; both work with other GIDs: a mismatch). */
static int judgePort(const pairState* st, int side, const railnetPairRdmaEntry* e, int tcpWorks, char* reported) {
  int fi;
  if (chosenWorks(st, side, e, &fi)) return 1;
  const pairRdmaPath* fail = &st->paths[fi];
  const railnetPairRdmaEntry* partner = sideEntry(st, !side, fail);
  int self = entryWorks(st, side, e), other = entryWorks(st, !side, partner);
  if (reported[fi] || (self && !other)) return 0; /* told, or the other side's GID is the one at fault */
  reported[fi] = 1;
  char why[256], fix[700];
  int step, err;
  pathFailure(fail, why, sizeof(why), &step, &err);
  if (self && other) {
    PROBLEM("set NCCL_IB_GID_INDEX on one side to a GID of the same RoCE version and address family as the other's",
            "the GIDs railnet uses on %s:%u here (index %d) and on the peer's %s:%u (index %d) work with others but "
            "not together: %s",
            st->lr[fail->local].dev, st->lr[fail->local].port, st->lr[fail->local].gidIndex,
            st->rr[fail->remote].dev, st->rr[fail->remote].port, st->rr[fail->remote].gidIndex, why);
    return 0;
  }
  int alt = 0;
  for (int q = 0; q < st->nPaths; q++)
    alt |= pairRdmaPathOk(&st->paths[q]) && samePort(sideEntry(st, side, &st->paths[q]), e);
  sfmt(fix, sizeof(fix), "%s%s", railnetPairRdmaHint(step, err),
       alt ? " -- another GID index of this port works (see the verdict)" : "");
  PROBLEM(fix, "RDMA from %s:%u %s (GID index %d, the one railnet uses%s) reaches no port %s: %s%s", e->dev, e->port,
          side ? "on the peer" : "here", e->gidIndex, e->isAuto & RAILNET_PAIR_GID_FORCED ? ", forced by NCCL_IB_GID_INDEX" : "",
          side ? "here" : "of the peer", why,
          tcpWorks && (step == RAILNET_PAIR_RDMA_WRITE || step == RAILNET_PAIR_RDMA_READ) ? "; TCP between the hosts works" : "");
  return 0;
}

int rdmaSection(const pairState* st) {
  section("pair_rdma", "RDMA: every active port x GID of interest on each side (RC QP, write + read back, both ways)");
  jStr("here_status", st->rdmaWhy[0] ? st->rdmaWhy : NULL);
  if (st->nLr == 0 || st->nRr == 0) {
    text("  here: %s; peer: %s\n", st->nLr ? "RDMA ports" : st->rdmaWhy, st->nRr ? "RDMA ports" : "no active RDMA port");
    if (st->nLr || st->nRr)
      WARNING("give both nodes an active RDMA port (or run NCCL with RAILNET_TRANSPORT=socket)",
              "only %s has active RDMA ports: NCCL falls back to TCP between these nodes", st->nLr ? "this host" : "the peer");
    return -1;
  }
  text("  %-36s %-36s result   (* the GID railnet uses)\n", "here", "peer");
  jOpen("paths", '[');
  for (int q = 0; q < st->nPaths; q++) rdmaRow(st, &st->paths[q]);
  jClose(']');
  rails(st);
  int tcpWorks = 0;
  for (int r = 0; r < st->nOut; r++) tcpWorks |= st->out[r].step == 0;
  int ok = 1;
  char reported[PAIR_MAX_PATHS] = {0};
  for (int i = 0; i < st->nLr; i++)
    if (st->lr[i].isAuto & RAILNET_PAIR_GID_CHOSEN) ok &= judgePort(st, 0, &st->lr[i], tcpWorks, reported);
  for (int j = 0; j < st->nRr; j++)
    if (st->rr[j].isAuto & RAILNET_PAIR_GID_CHOSEN) ok &= judgePort(st, 1, &st->rr[j], tcpWorks, reported);
  return ok;
}

/* Which working index to recommend: RoCE v2 over v1, routable over link-local (fe80::). */
static int gidScore(const railnetPairRdmaEntry* e) {
  return (e->roceVer == 2 ? 2 : 0) + (e->gid[0] == 0xfe && (e->gid[1] & 0xc0) == 0x80 ? 0 : 4);
}

void rdmaSettings(const pairState* st, int side, char* hca, size_t hcaSize, char* gid, size_t gidSize) {
  size_t len = 0;
  const railnetPairRdmaEntry* list = side ? st->rr : st->lr;
  int n = side ? st->nRr : st->nLr;
  hca[0] = gid[0] = '\0';
  for (int i = 0; i < n; i++) {
    int dup = 0, okChosen = 0, okOther = -1;
    for (int k = 0; k < i; k++) dup |= samePort(&list[k], &list[i]);
    if (dup) continue;
    int best = -1;
    for (int q = 0; q < st->nPaths; q++) {
      const pairRdmaPath* p = &st->paths[q];
      const railnetPairRdmaEntry* mine = sideEntry(st, side, p);
      if (!samePort(mine, &list[i]) || !pairRdmaPathOk(p)) continue;
      if (mine->isAuto & RAILNET_PAIR_GID_CHOSEN) okChosen = 1; /* the GID railnet uses works with some GID */
      else if (gidScore(mine) > best) best = gidScore(mine), okOther = mine->gidIndex;
    }
    if (!okChosen && okOther < 0) continue;
    if (len < hcaSize) len += (size_t)sfmt(hca + len, hcaSize - len, "%s%s:%u", len ? "," : "=", list[i].dev, list[i].port);
    if (!okChosen && !gid[0]) sfmt(gid, gidSize, "%d", okOther);
  }
}
