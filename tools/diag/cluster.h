/*
 * railnet-diag --cluster: find the bad node or link among N nodes. One process per node,
 * started by the job's own launcher (rank and size from srun, mpirun, a PMI launcher,
 * torchrun, or --rank/--size); they meet at the rendezvous (--rendezvous, else
 * MASTER_ADDR:MASTER_PORT, else NCCL_COMM_ID) where rank 0 listens.
 *
 *   cluster.c         options, launcher facts, the entry for every rank
 *   cluster_rank.c    a rank's side: join, then per round run the pair check against the
 *                     partner rank 0 names (or answer it), and report the link; the
 *                     rendezvous' HOST:PORT
 *   cluster_coord.c   rank 0: the joins, the plan (all pairs in N-1 rounds of disjoint pairs,
 *                     tools/diaglib/cluster_plan.h, then the pairs of links that read slow
 *                     once more) and its bound, the rounds, the links
 *   cluster_report.c  the links, the matrix and the verdict (text and --json)
 * Every rank runs a pair server (pair_server.c) all along, which its partners' checks talk to.
 */
#ifndef RAILNET_TOOLS_DIAG_CLUSTER_H_
#define RAILNET_TOOLS_DIAG_CLUSTER_H_

#include "cluster_plan.h"
#include "pair.h"

#define CLUSTER_CHECK_MS 90000 /* one pair check, --bw both ways included */
#define CLUSTER_SLOW_FRACTION 0.5
#define CLUSTER_AGAIN_ROUNDS 3 /* rounds that measure again the pairs of links that read slow */

typedef struct {
  int rank, size;
  char rendezvous[300];   /* HOST:PORT */
  const char* launcher;   /* "torchrun", ...; NULL: --rank/--size */
  int joinSec;            /* how long rank 0 waits for the ranks (--timeout) */
  uint64_t token;         /* the job's token (a hash of --token or the launcher's job id); 0: none */
  const char* tokenFrom;  /* "--token", "SLURM_JOB_ID", ...; NULL: none */
} clusterOptions;

/* What rank 0 knows of a rank. */
typedef struct {
  int joined, alive;      /* came to the rendezvous; still connected */
  int fd;                 /* its connection to rank 0 (-1 for rank 0 itself) */
  railnetClusterJoinMsg join;
  uint8_t family, addr[16];
} clusterRank;

/* The whole run as rank 0 saw it. */
typedef struct {
  const clusterOptions* o;
  clusterRank* ranks;     /* o->size of them */
  railnetClusterLinkMsg* links; /* every pair's outcome, as reported */
  int* times;             /* per link: how often it was measured (the best figure each way kept) */
  int nLinks;
  int rounds, againRounds; /* the plan's, and at most that many to measure slow links again */
  int again;              /* the round running measures again */
  double boundS;
} clusterRun;

/* cluster_rank.c */
/* The outcome of a pair check in st (rc, why: pairCheckQuiet's) as a LINK. */
void clusterSummarize(const pairState* st, int rc, const char* why, railnetClusterLinkMsg* m);
/* This rank's pair check of a round against the partner ROUND names; fills m. */
void clusterCheck(const pairServer* sv, int self, const railnetClusterRoundMsg* r, railnetClusterLinkMsg* m);
/* Ranks other than 0: join and follow rank 0's rounds; the exit status. */
int clusterFollow(const clusterOptions* o, const pairServer* sv);

/* cluster_coord.c: rank 0; the exit status. */
int clusterCoordinate(const clusterOptions* o, const pairServer* sv);

/* cluster_report.c: the report; returns the exit status (0 nothing wrong, 1 something is). */
int clusterReport(const clusterRun* run);
/* The links as the verdict judges them (those of ranks that went away: no result); free()d by the caller. */
railnetClusterLink* clusterJudgedLinks(const clusterRun* run);

/* cluster_rank.c: "HOST:PORT" (or "[v6]:PORT") split; 0 or EINVAL. */
int clusterSplitHostPort(const char* spec, char* host, size_t hostSize, int* port);

#endif
