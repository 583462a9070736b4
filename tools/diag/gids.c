/* The GID tables section: each port's configured GIDs with type, netdev and IPv4 address,
 * the index railnet's IB transport would use and why, and what is wrong with that choice.
 * The table, its classification and the choice are the transport's own (ib_explain.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diag.h"
#include "param.h"

typedef struct railnetIbGidEntry gidEntry;

/* The configured entries of g (and the chosen one, configured or not). */
static void gidRows(const gidEntry* g, int n, int chosen) {
  jOpen("gids", '[');
  for (int k = 0; k < n; k++) {
    if (!g[k].configured && k != chosen) continue;
    const char* v4 = g[k].ipv4Text;
    if (k == chosen)
      text("    %-4d %-40s %-11s %-10s %-15s <- chosen\n", k, g[k].text, g[k].type[0] ? g[k].type : "-",
           g[k].netdev[0] ? g[k].netdev : "-", v4[0] ? v4 : "-");
    else
      text("    %-4d %-40s %-11s %-10s %s\n", k, g[k].text, g[k].type[0] ? g[k].type : "-",
           g[k].netdev[0] ? g[k].netdev : "-", v4[0] ? v4 : "-");
    jOpen(NULL, '{');
    jInt("index", k);
    jStr("gid", g[k].text);
    jStr("type", g[k].type);
    jStr("netdev", g[k].netdev);
    jStr("ipv4", v4[0] ? v4 : NULL);
    jClose('}');
  }
  jClose(']');
}

/* RoCE ports: a forced NCCL_IB_GID_INDEX, no routable GID, or only a RoCE v1 one. */
static void judgeGid(const portInfo* p, const gidEntry* g, int n, int chosen, const char* why, const char* forced,
                     railnetParamSource src) {
  if (forced) {
    int fi = atoi(forced);
    if (fi >= n || !g[fi].configured)
      PROBLEM("unset NCCL_IB_GID_INDEX and let railnet choose",
              "NCCL_IB_GID_INDEX=%s (%s) names an empty GID on %s:%d: ibv_modify_qp fails with Invalid argument",
              forced, railnetParamSourceName(src), p->dev, p->port);
    else
      WARNING("unset NCCL_IB_GID_INDEX: NCCL >= 2.21 and railnet choose the GID per port; a wrong index makes "
              "ibv_modify_qp fail with Invalid argument",
              "NCCL_IB_GID_INDEX=%s (%s) overrides the automatic GID selection on %s:%d", forced,
              railnetParamSourceName(src), p->dev, p->port);
  } else if (chosen < 0 || chosen >= n || !g[chosen].routable) {
    char fix[256];
    sfmt(fix, sizeof(fix), "assign an IP address to %s (ip addr add ...) so that a routable RoCE v2 GID appears",
             p->netdev[0] ? p->netdev : "the port's netdev");
    PROBLEM(fix, "%s:%d has no routable GID of the wanted family and version (only link-local or empty entries): "
            "RoCE v2 traffic cannot be routed", p->dev, p->port);
  } else if (g[chosen].roceVersion == 1 && !strstr(why, "RoCE v1")) {
    WARNING("enable RoCE v2 on the NIC or set NCCL_IB_ROCE_VERSION_NUM=1 knowingly",
            "%s:%d only offers a RoCE v1 GID for that address: v1 is not routable across subnets", p->dev, p->port);
  }
}

void sectionGids(void) {
  section("gids", "GID tables (RoCE: the index railnet uses for the QPs)");
  if (nPorts == 0) {
    text("  no RDMA ports\n");
    return;
  }
  /* The index the transport takes: a malformed NCCL_IB_GID_INDEX reads as its default (-1,
   * automatic), as the transport reads it; the Settings section says so, once. */
  const railnetParam* gidParam = railnetParamFind("NCCL_IB_GID_INDEX");
  railnetParamSource src = RAILNET_SRC_DEFAULT;
  const char* forced = NULL;
  char forcedText[24];
  if (gidParam && railnetParamInt(gidParam) >= 0) {
    src = railnetParamSourceOf(gidParam);
    sfmt(forcedText, sizeof(forcedText), "%lld", (long long)railnetParamInt(gidParam));
    forced = forcedText;
  }
  jOpen("ports", '[');
  static gidEntry g[RAILNET_IB_EXPLAIN_MAX_GIDS];
  for (int i = 0; i < nPorts; i++) {
    portInfo* p = &ports[i];
    int n = railnetIbExplainGidTable(p->dev, p->port, g, RAILNET_IB_EXPLAIN_MAX_GIDS);
    (void)railnetIbExplainGid(p); /* a failure is index -1 with its sentence */
    int chosen = p->gid.index;
    const char* why = p->gid.why;
    const char* via = p->gid.via;
    text("  %s port %d (%s)\n", p->dev, p->port, p->link);
    text("    %-4s %-40s %-11s %-10s %s\n", "idx", "gid", "type", "netdev", "ipv4");
    jOpen(NULL, '{');
    jStr("device", p->dev);
    jInt("port", p->port);
    gidRows(g, n, chosen);
    jInt("chosen", chosen);
    jStr("why", why);
    jStr("read_through", via);
    jClose('}');
    text("    chosen: %d -- %s (GIDs read through %s)\n", chosen, why, via);
    int eth = strcmp(p->link, "Ethernet") == 0;
    if (!eth) continue;
    judgeGid(p, g, n, chosen, why, forced, src);
  }
  jClose(']');
}
