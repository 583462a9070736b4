/*
 * Driver statistics through the ethtool ioctl, and the classification of counter names on a
 * RoCE fabric (see ethtool.h). The ioctl sequence is the kernel's documented one: the size
 * of the ETH_SS_STATS string set, its names, then the values in the same order.
 */
#include "ethtool.h"
#include <ctype.h>
#include <errno.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* The kernel writes as many strings and values as the driver has at the moment of each
 * call, which may be more than it said a moment before: room for this many more. */
#define STATS_SLACK 256

static int ethtoolIoctl(int fd, const char* ifname, void* cmd) {
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  size_t len = strlen(ifname);
  if (len >= sizeof(ifr.ifr_name)) return ENODEV;
  memcpy(ifr.ifr_name, ifname, len);
  ifr.ifr_data = cmd;
  return ioctl(fd, SIOCETHTOOL, &ifr) == 0 ? 0 : errno;
}

/* The number of statistics of ifname: ETHTOOL_GSSET_INFO, else (older drivers) the n_stats
 * of ETHTOOL_GDRVINFO. */
static int statsCount(int fd, const char* ifname, uint32_t* n) {
  struct ethtool_sset_info* info = calloc(1, sizeof(*info) + sizeof(uint32_t));
  if (info == NULL) return ENOMEM;
  info->cmd = ETHTOOL_GSSET_INFO;
  info->sset_mask = 1ULL << ETH_SS_STATS;
  int err = ethtoolIoctl(fd, ifname, info);
  if (err == 0) *n = (info->sset_mask & (1ULL << ETH_SS_STATS)) ? info->data[0] : 0;
  free(info);
  if (err != EOPNOTSUPP) return err;
  struct ethtool_drvinfo drv;
  memset(&drv, 0, sizeof(drv));
  drv.cmd = ETHTOOL_GDRVINFO;
  err = ethtoolIoctl(fd, ifname, &drv);
  if (err == 0) *n = drv.n_stats;
  return err;
}

/* One read of names and values; EAGAIN when the driver's count changed in between. */
static int readOnce(int fd, const char* ifname, railnetStats* out) {
  uint32_t n = 0;
  int err = statsCount(fd, ifname, &n);
  if (err) return err;
  if (n == 0) return EOPNOTSUPP;
  if (n > 1u << 20) return E2BIG;
  uint32_t room = n + STATS_SLACK;
  struct ethtool_gstrings* names = calloc(1, sizeof(*names) + (size_t)room * ETH_GSTRING_LEN);
  struct ethtool_stats* values = calloc(1, sizeof(*values) + (size_t)room * sizeof(uint64_t));
  railnetStat* stats = calloc(n, sizeof(*stats));
  if (names == NULL || values == NULL || stats == NULL) {
    err = ENOMEM;
    goto done;
  }
  names->cmd = ETHTOOL_GSTRINGS;
  names->string_set = ETH_SS_STATS;
  names->len = n;
  values->cmd = ETHTOOL_GSTATS;
  values->n_stats = n;
  if ((err = ethtoolIoctl(fd, ifname, names)) != 0 || (err = ethtoolIoctl(fd, ifname, values)) != 0) goto done;
  if (names->len != n || values->n_stats != n) {
    err = EAGAIN;
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    const char* name = (const char*)names->data + (size_t)i * ETH_GSTRING_LEN;
    size_t len = strnlen(name, ETH_GSTRING_LEN);
    if (len >= sizeof(stats[i].name)) len = sizeof(stats[i].name) - 1;
    memcpy(stats[i].name, name, len);
    stats[i].name[len] = '\0';
    stats[i].value = values->data[i];
  }
  out->stats = stats;
  out->count = (int)n;
  stats = NULL;
done:
  free(names);
  free(values);
  free(stats);
  return err;
}

int railnetEthtoolStats(const char* ifname, railnetStats* out) {
  if (out == NULL) return EINVAL;
  out->stats = NULL;
  out->count = 0;
  if (ifname == NULL || ifname[0] == '\0') return ENODEV;
  /* Any socket reaches the device ioctls; AF_UNIX where IPv4 is missing. */
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int err = EAGAIN;
  for (int tries = 0; tries < 3 && err == EAGAIN; tries++) err = readOnce(fd, ifname, out);
  close(fd);
  return err;
}

void railnetStatsFree(railnetStats* s) {
  if (s == NULL) return;
  free(s->stats);
  s->stats = NULL;
  s->count = 0;
}

/* ---------------------------------------------------------------- classification */

#define MAX_TOKENS 16

/* A name in lower case (text, for substring checks) and its words (tok: the parts between
 * '_', '.', '-' and ' ', cut from a second copy). */
typedef struct {
  char text[RAILNET_STAT_NAME_LEN];
  char buf[RAILNET_STAT_NAME_LEN];
  char* tok[MAX_TOKENS];
  int n;
} parsedName;

static void parseName(const char* name, parsedName* p) {
  size_t len = strlen(name);
  if (len >= sizeof(p->text)) len = sizeof(p->text) - 1;
  for (size_t i = 0; i < len; i++) p->text[i] = (char)tolower((unsigned char)name[i]);
  p->text[len] = '\0';
  memcpy(p->buf, p->text, len + 1);
  p->n = 0;
  char* s = p->buf;
  while (*s && p->n < MAX_TOKENS) {
    while (*s == '_' || *s == '.' || *s == '-' || *s == ' ') *s++ = '\0';
    if (*s == '\0') break;
    p->tok[p->n++] = s;
    while (*s && *s != '_' && *s != '.' && *s != '-' && *s != ' ') s++;
  }
}

static int allDigits(const char* s) {
  if (*s == '\0') return 0;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s)) return 0;
  return 1;
}

static int has(const parsedName* p, const char* sub) { return strstr(p->text, sub) != NULL; }

static int hasToken(const parsedName* p, const char* tok) {
  for (int i = 0; i < p->n; i++)
    if (strcmp(p->tok[i], tok) == 0) return 1;
  return 0;
}

/* rx3_..., tx0_..., ch2_..., rx_queue_0_..., queue_3_..., ring_1_...: one queue's count. */
static int perQueue(const parsedName* p) {
  static const char* const prefixes[] = {"rx", "tx", "ch", "q", "xdpsq", "xsk"};
  static const char* const words[] = {"queue", "ch", "channel", "ring", "q"};
  for (int i = 0; i < p->n; i++) {
    const char* t = p->tok[i];
    for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
      size_t l = strlen(prefixes[k]);
      if (strncmp(t, prefixes[k], l) == 0 && allDigits(t + l)) return 1;
    }
    if (i + 1 < p->n && allDigits(p->tok[i + 1]))
      for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++)
        if (strcmp(t, words[k]) == 0) return 1;
  }
  return 0;
}

static int direction(const parsedName* p) {
  for (int i = 0; i < p->n; i++) {
    const char* t = p->tok[i];
    if (!strcmp(t, "rx") || !strcmp(t, "rcv") || !strcmp(t, "rcvd") || !strcmp(t, "recv") || !strcmp(t, "received"))
      return RAILNET_DIR_RX;
    if (!strcmp(t, "tx") || !strcmp(t, "sent") || !strcmp(t, "xmit") || !strcmp(t, "transmitted"))
      return RAILNET_DIR_TX;
  }
  return RAILNET_DIR_NONE;
}

/* prio3, prio_3, priority_3, pri3, pcp3: the 802.1p priority of a per-priority counter. */
static int priority(const parsedName* p) {
  static const char* const words[] = {"priority", "prio", "pri", "pcp"};
  for (int i = 0; i < p->n; i++) {
    const char* t = p->tok[i];
    for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
      size_t l = strlen(words[k]);
      if (strncmp(t, words[k], l) != 0) continue;
      const char* num = t[l] ? t + l : (i + 1 < p->n ? p->tok[i + 1] : "");
      if (allDigits(num) && strlen(num) == 1 && num[0] < '0' + RAILNET_PRIOS) return num[0] - '0';
      break; /* "priority" also starts with "pri": the longest word decides */
    }
  }
  return -1;
}

static railnetCtrKind kindOf(const parsedName* p, int dir) {
  if (hasToken(p, "bytes") || hasToken(p, "octets")) return RAILNET_CTR_OTHER;
  if (has(p, "slow_restart") || has(p, "adp_retrans")) return RAILNET_CTR_RETRANS;
  if (has(p, "cnp")) {
    if (has(p, "ignor")) return RAILNET_CTR_CNP_IGNORED;
    if (has(p, "handled")) return RAILNET_CTR_CNP_HANDLED;
    if (dir == RAILNET_DIR_TX) return RAILNET_CTR_CNP_SENT;
    if (dir == RAILNET_DIR_RX) return RAILNET_CTR_CNP_HANDLED;
    return RAILNET_CTR_OTHER;
  }
  if (has(p, "ecn") || hasToken(p, "marked")) return RAILNET_CTR_ECN_MARKED;
  if (has(p, "out_of_buffer") || has(p, "no_buf")) return RAILNET_CTR_OUT_OF_BUFFER;
  if (has(p, "pause") || has(p, "xoff") || has(p, "pfc")) {
    /* not frames: how long, how often the state changed, storm events; xon: resume frames */
    if (has(p, "duration") || has(p, "transition") || has(p, "storm") || has(p, "time") || has(p, "xon"))
      return RAILNET_CTR_OTHER;
    return RAILNET_CTR_PAUSE;
  }
  if ((has(p, "discard") || has(p, "drop")) && !has(p, "xdp")) return RAILNET_CTR_DISCARD;
  return RAILNET_CTR_OTHER;
}

railnetCtrClass railnetCounterClassify(const char* name) {
  railnetCtrClass c = {RAILNET_CTR_OTHER, RAILNET_DIR_NONE, -1};
  if (name == NULL) return c;
  parsedName p;
  parseName(name, &p);
  if (p.n == 0 || perQueue(&p)) return c;
  c.dir = direction(&p);
  c.kind = kindOf(&p, c.dir);
  c.prio = c.kind == RAILNET_CTR_OTHER ? -1 : priority(&p);
  if (c.kind == RAILNET_CTR_OTHER) c.dir = RAILNET_DIR_NONE;
  return c;
}

const char* railnetCtrKindName(railnetCtrKind kind) {
  switch (kind) {
    case RAILNET_CTR_PAUSE: return "pause";
    case RAILNET_CTR_DISCARD: return "discard";
    case RAILNET_CTR_OUT_OF_BUFFER: return "out of buffer";
    case RAILNET_CTR_ECN_MARKED: return "ECN marked";
    case RAILNET_CTR_CNP_SENT: return "CNP sent";
    case RAILNET_CTR_CNP_HANDLED: return "CNP handled";
    case RAILNET_CTR_CNP_IGNORED: return "CNP ignored";
    case RAILNET_CTR_RETRANS: return "retransmission";
    default: return "other";
  }
}

void railnetCongestionSum(const railnetStat* stats, int n, railnetCongestion* out) {
  memset(out, 0, sizeof(*out));
  for (int i = 0; stats && i < n; i++) {
    railnetCtrClass c = railnetCounterClassify(stats[i].name);
    if (c.kind == RAILNET_CTR_OTHER) continue;
    out->have[c.kind]++;
    if (c.prio >= 0) {
      out->prio[c.kind][c.dir][c.prio] += stats[i].value;
    } else {
      out->port[c.kind][c.dir] += stats[i].value;
      out->havePort[c.kind]++;
    }
  }
}

uint64_t railnetCongestionPrio(const railnetCongestion* c, railnetCtrKind kind, int prio) {
  if (kind <= RAILNET_CTR_OTHER || kind >= RAILNET_CTR_KINDS || prio < 0 || prio >= RAILNET_PRIOS) return 0;
  return c->prio[kind][RAILNET_DIR_NONE][prio] + c->prio[kind][RAILNET_DIR_RX][prio] +
         c->prio[kind][RAILNET_DIR_TX][prio];
}

uint64_t railnetCongestionTotal(const railnetCongestion* c, railnetCtrKind kind) {
  if (kind <= RAILNET_CTR_OTHER || kind >= RAILNET_CTR_KINDS) return 0;
  if (c->havePort[kind])
    return c->port[kind][RAILNET_DIR_NONE] + c->port[kind][RAILNET_DIR_RX] + c->port[kind][RAILNET_DIR_TX];
  uint64_t sum = 0;
  for (int p = 0; p < RAILNET_PRIOS; p++) sum += railnetCongestionPrio(c, kind, p);
  return sum;
}
