/*
 * A netdev's driver statistics (what `ethtool -S <if>` prints) and the classification of
 * counter names that matter on a RoCE fabric: pause frames (global 802.3x and per priority,
 * PFC), discards, ECN marks and congestion notification packets (CNPs), and the RDMA
 * retransmission / slow-restart events. The names come from the driver (mlx5, bnxt, ice,
 * i40e, ... each its own), so the classifier works on the words of a name, not on a list.
 *
 * The reader is a probe: it logs nothing and returns an errno value (railnet-diag shows it).
 * The classifier takes any list of name/value pairs: an ethtool read, the files of an RDMA
 * port's hw_counters/ directory, or a list a test makes up.
 */
#ifndef RAILNET_ETHTOOL_H
#define RAILNET_ETHTOOL_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_STAT_NAME_LEN 64 /* ETH_GSTRING_LEN is 32; sysfs file names may be longer */
#define RAILNET_PRIOS 8          /* 802.1p priorities 0..7 */

typedef struct {
  char name[RAILNET_STAT_NAME_LEN];
  uint64_t value;
} railnetStat;

typedef struct {
  railnetStat* stats; /* malloc'ed; railnetStatsFree releases it */
  int count;
} railnetStats;

/* The driver statistics of netdev ifname through the SIOCETHTOOL ioctl (ETHTOOL_GSSET_INFO,
 * ETHTOOL_GSTRINGS, ETHTOOL_GSTATS); no privileges needed. Returns 0 and fills *out, or an
 * errno value (ENODEV: no such netdev in this network namespace; EOPNOTSUPP: the driver has
 * no statistics) with *out empty. Logs nothing. */
int railnetEthtoolStats(const char* ifname, railnetStats* out);
void railnetStatsFree(railnetStats* s);

/* What a counter counts. */
typedef enum {
  RAILNET_CTR_OTHER = 0,      /* not one of the kinds below (bytes, packets, per-queue, ...) */
  RAILNET_CTR_PAUSE,          /* pause / PFC (XOFF) frames */
  RAILNET_CTR_DISCARD,        /* packets discarded or dropped by the NIC */
  RAILNET_CTR_OUT_OF_BUFFER,  /* dropped for want of a posted receive buffer */
  RAILNET_CTR_ECN_MARKED,     /* ECN-marked (CE) packets received */
  RAILNET_CTR_CNP_SENT,       /* CNPs sent (notification point: answers to ECN marks) */
  RAILNET_CTR_CNP_HANDLED,    /* CNPs received and acted on (reaction point: rate cut) */
  RAILNET_CTR_CNP_IGNORED,    /* CNPs received and ignored */
  RAILNET_CTR_RETRANS,        /* RoCE adaptive retransmissions and slow restarts */
  RAILNET_CTR_KINDS
} railnetCtrKind;

enum { RAILNET_DIR_NONE = 0, RAILNET_DIR_RX, RAILNET_DIR_TX };

typedef struct {
  railnetCtrKind kind;
  int dir;  /* RAILNET_DIR_*: received or sent, where the name says so */
  int prio; /* 0..7 for a per-priority counter, -1 for the whole port */
} railnetCtrClass;

/* Classifies a counter name (case-insensitive). Per-queue and per-channel counters
 * (rx3_..., ch0_..., rx_queue_0_...) are RAILNET_CTR_OTHER: their port totals are counted
 * once. Durations, transitions and storm events of pause are OTHER too (not frames). */
railnetCtrClass railnetCounterClassify(const char* name);
/* "pause", "discard", "out of buffer", "ECN marked", "CNP sent", ... */
const char* railnetCtrKindName(railnetCtrKind kind);

/* The sums of a list of counters by kind, direction and priority. */
typedef struct {
  uint64_t port[RAILNET_CTR_KINDS][3];                 /* [kind][dir]: port-wide counters */
  uint64_t prio[RAILNET_CTR_KINDS][3][RAILNET_PRIOS];  /* [kind][dir][prio] */
  int have[RAILNET_CTR_KINDS];                         /* how many counters of each kind */
  int havePort[RAILNET_CTR_KINDS];                     /* ... of them port-wide */
} railnetCongestion;
void railnetCongestionSum(const railnetStat* stats, int n, railnetCongestion* out);
/* Every direction of a kind: the port-wide counters, else (a driver with per-priority
 * counters only) the sum over the priorities. */
uint64_t railnetCongestionTotal(const railnetCongestion* c, railnetCtrKind kind);
/* Every direction of a kind on one priority. */
uint64_t railnetCongestionPrio(const railnetCongestion* c, railnetCtrKind kind, int prio);

#ifdef __cplusplus
}
#endif
#endif
