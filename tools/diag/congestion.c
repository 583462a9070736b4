/* RoCE congestion and the lossless fabric: per RoCE port, the congestion counters of its
 * hw_counters/ directory (ECN marks, CNPs, adaptive retransmissions, out of buffer: whatever
 * the driver has) and the pause / discard / ECN statistics of its netdev (ethtool -S, read
 * by the library's railnetEthtoolStats), both classified by railnetCounterClassify. The
 * section shows them; --watch samples them with the error counters and turns their growth
 * into findings: pause frames (back-pressure), ECN marks and CNPs (congestion), drops on a
 * priority that should be lossless, ECN marks without CNPs (congestion control disabled). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "diag.h"
#include "ethtool.h"
#include "param.h"

#define MAX_CONG 160 /* classified counters kept per port (mlx5 has ~60 of its ~1000) */

typedef struct {
  int n;
  railnetStat s[MAX_CONG];
  unsigned char fromEth[MAX_CONG]; /* 1: ethtool -S of the netdev, 0: hw_counters/ */
  int ethErr;                      /* railnetEthtoolStats' result; -1: no netdev */
  int ethCount;                    /* statistics the netdev has, classified or not */
} congSample;

static int isRoce(const portInfo* p) { return strcmp(p->link, "Ethernet") == 0; }

static void keep(congSample* c, const char* name, uint64_t v, int fromEth) {
  if (c->n >= MAX_CONG || railnetCounterClassify(name).kind == RAILNET_CTR_OTHER) return;
  sfmt(c->s[c->n].name, sizeof(c->s[c->n].name), "%s", name);
  c->s[c->n].value = v;
  c->fromEth[c->n] = (unsigned char)fromEth;
  c->n++;
}

static int byName(const void* a, const void* b) {
  return strcmp(((const railnetStat*)a)->name, ((const railnetStat*)b)->name);
}

/* The classified counters of p's hw_counters/ (sorted by name) and of its netdev. */
static void readSample(const portInfo* p, congSample* c) {
  c->n = 0;
  char dir[PATH_MAX + 128];
  sfmt(dir, sizeof(dir), "%s/class/infiniband/%s/ports/%d/hw_counters", sysfsRoot, p->dev, p->port);
  DIR* d = opendir(dir);
  if (d != NULL) {
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
      char buf[64];
      if (e->d_name[0] == '.' || railnetCounterClassify(e->d_name).kind == RAILNET_CTR_OTHER) continue;
      if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/hw_counters/%s", p->dev, p->port, e->d_name) == 0)
        keep(c, e->d_name, strtoull(buf, NULL, 10), 0);
    }
    closedir(d);
    qsort(c->s, (size_t)c->n, sizeof(c->s[0]), byName); /* all from hw_counters so far */
  }
  c->ethErr = -1;
  c->ethCount = 0;
  if (p->netdev[0] == '\0') return;
  railnetStats st;
  c->ethErr = railnetEthtoolStats(p->netdev, &st);
  c->ethCount = st.count;
  for (int i = 0; i < st.count; i++) keep(c, st.stats[i].name, st.stats[i].value, 1);
  railnetStatsFree(&st);
}

static void sumOf(const congSample* c, railnetCongestion* sum) { railnetCongestionSum(c->s, c->n, sum); }

static const char* sourceName(int fromEth) { return fromEth ? "ethtool" : "hw_counters"; }

/* The priority NCCL's RoCE traffic uses, from NCCL_IB_TC (DSCP = TC / 4, priority = DSCP / 8
 * on the usual DSCP-to-priority mapping) or NCCL_IB_SL (the PCP); -1 when neither is set. */
static int ncclPriority(char* why, size_t size) {
  long long tc = railnetParamIntByName("NCCL_IB_TC"), sl = railnetParamIntByName("NCCL_IB_SL");
  if (tc >= 0) {
    sfmt(why, size, "NCCL_IB_TC=%lld (DSCP %lld) puts NCCL's traffic on priority %lld", tc, tc >> 2, tc >> 5);
    return (int)(tc >> 5);
  }
  if (sl >= 0) {
    sfmt(why, size, "NCCL_IB_SL=%lld puts NCCL's traffic on priority %lld", sl, sl & 7);
    return (int)(sl & 7);
  }
  sfmt(why, size, "NCCL_IB_TC and NCCL_IB_SL are unset");
  return -1;
}

/* The priorities that should be lossless: NCCL's, and those that carry PFC pause frames. */
static unsigned losslessMask(const railnetCongestion* a, const railnetCongestion* b) {
  char why[160];
  int np = ncclPriority(why, sizeof(why));
  unsigned mask = np >= 0 ? 1u << np : 0;
  for (int p = 0; p < RAILNET_PRIOS; p++)
    if (railnetCongestionPrio(a, RAILNET_CTR_PAUSE, p) || (b && railnetCongestionPrio(b, RAILNET_CTR_PAUSE, p)))
      mask |= 1u << p;
  return mask;
}

static void prioList(unsigned mask, char* buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int p = 0; p < RAILNET_PRIOS; p++)
    if ((mask & (1u << p)) && len < size) len += (size_t)sfmt(buf + len, size - len, "%s%d", len ? "," : "", p);
  if (len == 0) sfmt(buf, size, "none");
}

/* ---------------------------------------------------------------- the section */

static void showPort(const portInfo* p, const congSample* c) {
  text("  %s:%d (netdev %s)\n", p->dev, p->port, p->netdev[0] ? p->netdev : "-");
  jOpen(NULL, '{');
  jStr("device", p->dev);
  jInt("port", p->port);
  jStr("netdev", p->netdev[0] ? p->netdev : NULL);
  for (int src = 0; src <= 1; src++) {
    jOpen(src ? "ethtool" : "hw_counters", '{');
    for (int i = 0; i < c->n; i++)
      if (c->fromEth[i] == src) jInt(c->s[i].name, (long long)c->s[i].value);
    jClose('}');
  }
  jInt("ethtool_statistics", c->ethCount);
  jStr("ethtool_error", c->ethErr > 0 ? strerror(c->ethErr) : NULL);
  jClose('}');
  for (int k = RAILNET_CTR_OTHER + 1; k < RAILNET_CTR_KINDS; k++) {
    int shown = 0;
    for (int i = 0; i < c->n; i++) {
      if (railnetCounterClassify(c->s[i].name).kind != (railnetCtrKind)k) continue;
      if (!shown++) text("    %-15s", railnetCtrKindName((railnetCtrKind)k));
      text(" %s=%llu", c->s[i].name, (unsigned long long)c->s[i].value);
    }
    if (shown) text("\n");
  }
  if (c->ethErr > 0)
    text("    ethtool -S %s: not read: %s%s\n", p->netdev, strerror(c->ethErr),
         c->ethErr == ENODEV       ? " (no such netdev in this network namespace)"
         : c->ethErr == EOPNOTSUPP ? " (its driver has no statistics)"
                                   : "");
  int hw = 0;
  for (int i = 0; i < c->n; i++) hw += !c->fromEth[i];
  if (c->ethErr == 0)
    text("    ethtool -S %s: %d statistics, %d of them about pause, discards or congestion\n", p->netdev, c->ethCount,
         c->n - hw);
  if (hw == 0) text("    hw_counters: no congestion counters exposed\n");
}

/* Since boot, only what points at a lasting misconfiguration; growth is for --watch. */
static void judgeStatic(const portInfo* p, const congSample* c) {
  railnetCongestion s;
  sumOf(c, &s);
  unsigned mask = losslessMask(&s, NULL);
  for (int pr = 0; pr < RAILNET_PRIOS; pr++) {
    uint64_t drops = railnetCongestionPrio(&s, RAILNET_CTR_DISCARD, pr);
    if ((mask & (1u << pr)) && drops)
      WARNING("run railnet-diag --watch 60 during a job: if they grow, enable PFC on that priority end to end "
              "(NIC: mlnx_qos -i <netdev> --pfc; and every switch port on the path)",
              "%s:%d (%s) dropped %llu packets on priority %d, which should be lossless, since boot or the last reset",
              p->dev, p->port, p->netdev, (unsigned long long)drops, pr);
  }
  uint64_t ecn = railnetCongestionTotal(&s, RAILNET_CTR_ECN_MARKED);
  if (ecn && s.have[RAILNET_CTR_CNP_SENT] && railnetCongestionTotal(&s, RAILNET_CTR_CNP_SENT) == 0)
    WARNING("run railnet-diag --watch 60 during a job; enable RoCE congestion control on the NIC (mlx5: "
            "/sys/class/net/<netdev>/ecn/roce_np/enable/<prio> and roce_rp/enable/<prio>)",
            "%s:%d received %llu ECN-marked packets and sent no CNP since boot: congestion control (DCQCN) "
            "looks disabled on this NIC",
            p->dev, p->port, (unsigned long long)ecn);
}

void sectionCongestion(void) {
  section("congestion", "RoCE congestion and lossless fabric (hw_counters, ethtool -S; since boot or the last reset)");
  char why[160], prios[32];
  int np = ncclPriority(why, sizeof(why));
  jInt("nccl_priority", np);
  jOpen("ports", '[');
  int roce = 0;
  static congSample c; /* large: not on the stack */
  for (int i = 0; i < nPorts; i++) {
    if (!isRoce(&ports[i])) continue;
    roce++;
    readSample(&ports[i], &c);
    showPort(&ports[i], &c);
    railnetCongestion s;
    sumOf(&c, &s);
    prioList(losslessMask(&s, NULL), prios, sizeof(prios));
    text("    lossless priorities (NCCL's, and those with pause frames): %s -- %s\n", prios, why);
    judgeStatic(&ports[i], &c);
  }
  jClose(']');
  if (roce == 0) text("  no RoCE ports\n");
}

/* ---------------------------------------------------------------- --watch */

static congSample* first;  /* per port index */
static congSample* prev;
static double tFirst, tPrev;

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The value of counter (name, source) in c; -1 when c has none. */
static long long valueIn(const congSample* c, const char* name, int fromEth) {
  for (int i = 0; i < c->n; i++)
    if (c->fromEth[i] == fromEth && strcmp(c->s[i].name, name) == 0) return (long long)c->s[i].value;
  return -1;
}

int congestionWatchStart(void) {
  int roce = 0;
  for (int i = 0; i < nPorts; i++) roce += isRoce(&ports[i]);
  if (roce == 0) return 0;
  first = calloc((size_t)nPorts, sizeof(*first));
  prev = calloc((size_t)nPorts, sizeof(*prev));
  if (first == NULL || prev == NULL) return 0;
  for (int i = 0; i < nPorts; i++)
    if (isRoce(&ports[i])) {
      readSample(&ports[i], &first[i]);
      prev[i] = first[i];
    }
  tFirst = tPrev = nowSec();
  return roce;
}

void congestionWatchTick(int t) {
  if (first == NULL) return;
  static congSample cur;
  double now = nowSec(), dt = now - tPrev > 0 ? now - tPrev : 1;
  for (int i = 0; i < nPorts; i++) {
    if (!isRoce(&ports[i])) continue;
    readSample(&ports[i], &cur);
    for (int k = 0; k < cur.n; k++) {
      long long was = valueIn(&prev[i], cur.s[k].name, cur.fromEth[k]);
      long long v = (long long)cur.s[k].value;
      if (was >= 0 && v > was)
        text("  +%3ds %s:%d %s%s%s +%lld (%.0f/s, now %lld)\n", t, ports[i].dev, ports[i].port,
             cur.fromEth[k] ? ports[i].netdev : "", cur.fromEth[k] ? " " : "", cur.s[k].name, v - was,
             (double)(v - was) / dt, v);
    }
    prev[i] = cur;
  }
  tPrev = now;
}

/* The sums over the counters of c that other has too: a counter that appeared or vanished
 * during the watch has no growth. */
static void sumOfCommon(const congSample* c, const congSample* other, railnetCongestion* sum) {
  static congSample common;
  common.n = 0;
  for (int k = 0; k < c->n; k++)
    if (valueIn(other, c->s[k].name, c->fromEth[k]) >= 0) {
      common.s[common.n] = c->s[k];
      common.fromEth[common.n++] = c->fromEth[k];
    }
  sumOf(&common, sum);
}

/* "name +delta, name +delta" of the counters of kind that grew (on priority prio, or all). */
static void grownList(int i, railnetCtrKind kind, int prio, char* buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int k = 0; k < prev[i].n && len < size; k++) {
    railnetCtrClass c = railnetCounterClassify(prev[i].s[k].name);
    if (c.kind != kind || (prio >= 0 && c.prio != prio)) continue;
    long long was = valueIn(&first[i], prev[i].s[k].name, prev[i].fromEth[k]);
    if (was < 0 || (long long)prev[i].s[k].value <= was) continue;
    len += (size_t)sfmt(buf + len, size - len, "%s%s +%lld", len ? ", " : "", prev[i].s[k].name,
                        (long long)prev[i].s[k].value - was);
  }
}

static uint64_t grown(const railnetCongestion* a, const railnetCongestion* b, railnetCtrKind kind) {
  uint64_t x = railnetCongestionTotal(a, kind), y = railnetCongestionTotal(b, kind);
  return y > x ? y - x : 0;
}
static uint64_t grownPrio(const railnetCongestion* a, const railnetCongestion* b, railnetCtrKind kind, int p) {
  uint64_t x = railnetCongestionPrio(a, kind, p), y = railnetCongestionPrio(b, kind, p);
  return y > x ? y - x : 0;
}

/* Growth over the whole watch into findings, for port i. */
static void judgeGrowth(int i, int seconds) {
  const portInfo* p = &ports[i];
  railnetCongestion a, b;
  sumOfCommon(&first[i], &prev[i], &a);
  sumOfCommon(&prev[i], &first[i], &b);
  char why[160], list[512], prios[32], where[96];
  int np = ncclPriority(why, sizeof(why));
  unsigned lossless = losslessMask(&a, &b);
  sfmt(where, sizeof(where), "%s:%d (%s)", p->dev, p->port, p->netdev[0] ? p->netdev : "no netdev");

  /* pause frames: back-pressure */
  if (grown(&a, &b, RAILNET_CTR_PAUSE)) {
    unsigned pauseMask = 0;
    for (int pr = 0; pr < RAILNET_PRIOS; pr++)
      if (grownPrio(&a, &b, RAILNET_CTR_PAUSE, pr)) pauseMask |= 1u << pr;
    grownList(i, RAILNET_CTR_PAUSE, -1, list, sizeof(list));
    prioList(pauseMask, prios, sizeof(prios));
    if (np >= 0 && pauseMask && !(pauseMask & (1u << np)))
      PROBLEM("make the PFC priority and NCCL's traffic class agree: enable PFC on NCCL's priority (NIC: mlnx_qos "
              "-i <netdev> --pfc, and the switch ports) or set NCCL_IB_TC to the lossless priority's DSCP x 4 "
              "(priority 3 <-> NCCL_IB_TC=106 on the usual mapping)",
              "%s pause frames grew in %d s on priority %s (%s), but %s: the PFC priority does not match NCCL's "
              "traffic class",
              where, seconds, prios, list, why);
    else
      WARNING("received pause: a switch downstream is short of buffer; sent pause: this host does not drain fast "
              "enough. Check that the PFC priority matches NCCL_IB_TC/NCCL_IB_SL (mlnx_qos -i <netdev>) and the "
              "switch's buffer and PFC config",
              "%s pause frames grew in %d s (%s; priorities with pause frames: %s): the fabric is back-pressuring",
              where, seconds, list, prios);
  }

  /* drops: on a priority that should be lossless, else anywhere */
  int lossyDrops = 0;
  for (int pr = 0; pr < RAILNET_PRIOS; pr++) {
    uint64_t d = grownPrio(&a, &b, RAILNET_CTR_DISCARD, pr);
    if (!d) continue;
    if (!(lossless & (1u << pr))) {
      lossyDrops = 1;
      continue;
    }
    grownList(i, RAILNET_CTR_DISCARD, pr, list, sizeof(list));
    PROBLEM("enable PFC on that priority on the NIC (mlnx_qos -i <netdev> --pfc) and on every switch port "
            "between the hosts, with the same DSCP/PCP-to-priority mapping on all of them (mlnx_qos --trust dscp)",
            "%s dropped %llu packets in %d s on priority %d, which should be lossless (%s): PFC is not enabled "
            "on that priority end to end",
            where, (unsigned long long)d, seconds, pr,
            np == pr ? why : "it carries PFC pause frames");
  }
  if (b.havePort[RAILNET_CTR_DISCARD] && grown(&a, &b, RAILNET_CTR_DISCARD)) lossyDrops = 1;
  if (lossyDrops) {
    grownList(i, RAILNET_CTR_DISCARD, -1, list, sizeof(list));
    WARNING("if RoCE traffic crosses this port, make its priority lossless (PFC) end to end; ethtool -S <netdev> "
            "and the switch's counters show where the drops happen",
            "%s discarded packets in %d s (%s)", where, seconds, list);
  }

  /* ECN marks and CNPs: congestion, and whether the NIC reacts to it */
  uint64_t ecn = grown(&a, &b, RAILNET_CTR_ECN_MARKED), sent = grown(&a, &b, RAILNET_CTR_CNP_SENT);
  uint64_t handled = grown(&a, &b, RAILNET_CTR_CNP_HANDLED), ignored = grown(&a, &b, RAILNET_CTR_CNP_IGNORED);
  int ccOff = 0;
  if (ecn && b.have[RAILNET_CTR_CNP_SENT] && sent == 0) {
    ccOff = 1;
    PROBLEM("enable RoCE congestion control for NCCL's priority on every NIC (mlx5: echo 1 > "
            "/sys/class/net/<netdev>/ecn/roce_np/enable/<prio> and .../roce_rp/enable/<prio>, or the NIC's "
            "firmware setting, mlxconfig ROCE_CC_PRIO_MASK_P1)",
            "%s received %llu ECN-marked packets in %d s and sent no CNP: congestion control (DCQCN) is disabled "
            "on this NIC, so the senders never slow down",
            where, (unsigned long long)ecn, seconds);
  }
  if (ignored && handled == 0) {
    ccOff = 1;
    PROBLEM("enable the reaction point for NCCL's priority (mlx5: echo 1 > "
            "/sys/class/net/<netdev>/ecn/roce_rp/enable/<prio>)",
            "%s ignored %llu CNPs in %d s and handled none: congestion control is disabled on this NIC's "
            "sending side, so it never slows down",
            where, (unsigned long long)ignored, seconds);
  }
  if (!ccOff && (ecn || sent || handled))
    WARNING("look for incast (many ranks sending to one: all-to-all, uneven rings, other jobs on the same links) "
            "and check that NCCL's traffic class (NCCL_IB_TC) is the one the switches ECN-mark and PFC protects",
            "%s congestion in %d s: ECN-marked packets +%llu, CNPs sent +%llu, CNPs handled +%llu: DCQCN is "
            "working (the senders slow down)",
            where, seconds, (unsigned long long)ecn, (unsigned long long)sent, (unsigned long long)handled);

  if (grown(&a, &b, RAILNET_CTR_RETRANS)) {
    grownList(i, RAILNET_CTR_RETRANS, -1, list, sizeof(list));
    WARNING("packets are lost in the fabric: make NCCL's priority lossless (PFC) end to end and check the switches' "
            "drop counters",
            "%s retransmitted in %d s (%s)", where, seconds, list);
  }
  if (grown(&a, &b, RAILNET_CTR_OUT_OF_BUFFER)) {
    grownList(i, RAILNET_CTR_OUT_OF_BUFFER, -1, list, sizeof(list));
    WARNING("the receiver does not post buffers fast enough: check that the process on this host is not stalled "
            "(CPU, GPU); for the netdev, a larger ring (ethtool -G <netdev> rx N)",
            "%s dropped packets for want of a posted receive buffer in %d s (%s)", where, seconds, list);
  }
}

int congestionWatchEnd(int seconds) {
  jOpen("congestion_growth", '[');
  if (first == NULL) {
    jClose(']');
    return 0;
  }
  double dt = tPrev - tFirst > 0 ? tPrev - tFirst : seconds;
  int grew = 0;
  text("congestion counters, growth over %d s:\n", seconds);
  for (int i = 0; i < nPorts; i++) {
    if (!isRoce(&ports[i])) continue;
    for (int k = 0; k < prev[i].n; k++) {
      long long was = valueIn(&first[i], prev[i].s[k].name, prev[i].fromEth[k]);
      long long v = (long long)prev[i].s[k].value;
      if (was < 0 || v <= was) continue;
      grew = 1;
      jOpen(NULL, '{');
      jStr("device", ports[i].dev);
      jInt("port", ports[i].port);
      jStr("source", sourceName(prev[i].fromEth[k]));
      if (prev[i].fromEth[k]) jStr("netdev", ports[i].netdev);
      jStr("counter", prev[i].s[k].name);
      jStr("kind", railnetCtrKindName(railnetCounterClassify(prev[i].s[k].name).kind));
      jInt("delta", v - was);
      jFixed("per_second", (double)(v - was) / dt, 1);
      jClose('}');
      text("  %s:%d %s%s%s +%lld (%.1f/s)\n", ports[i].dev, ports[i].port, prev[i].fromEth[k] ? ports[i].netdev : "",
           prev[i].fromEth[k] ? " " : "", prev[i].s[k].name, v - was, (double)(v - was) / dt);
    }
  }
  jClose(']');
  if (!grew) text("  none: no congestion counter grew\n");
  return grew;
}

void congestionWatchJudge(int seconds) {
  if (first == NULL) return;
  for (int i = 0; i < nPorts; i++)
    if (isRoce(&ports[i])) judgeGrowth(i, seconds);
  free(first);
  free(prev);
  first = prev = NULL;
}
