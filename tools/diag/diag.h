/*
 * railnet-diag's parts: what each file of tools/diag/ offers the others.
 *
 *   main.c        options, then the sections in order, then the findings report
 *   options.c     the command line and --help
 *   report.c      text output, sections, findings and the closing summary
 *   sysfs.c       files under $SYSFS_PATH and /proc
 *   interfaces.c  interfaces and ncclFindInterfaces' choice
 *   tcp_ports.c   the local TCP port range
 *   rdma.c        the RDMA ports (the IB transport's own account of them, ib_explain.h)
 *                 and their section
 *   gids.c        the GID tables section
 *   counters.c    port error counters and --watch
 *   congestion.c  RoCE congestion and lossless-fabric counters (hw_counters, ethtool -S)
 *   gpudirect.c   GPUDirect RDMA
 *   memlock.c     RLIMIT_MEMLOCK
 *   params.c      the param table
 * Shared with railnet-perf (tools/common/): json.h, the --json writer; cli.h, the
 * command-line conventions (usage errors, --version). What railnet decides about RDMA ports,
 * GIDs and GPUDirect comes from the library (ib_explain.h); nothing here re-implements it.
 *   pair*.c       --serve / --pair: the checks between two nodes (pair.h)
 *   cluster*.c    --cluster: every pair of N nodes, the bad node or link (cluster.h)
 */
#ifndef RAILNET_TOOLS_DIAG_H_
#define RAILNET_TOOLS_DIAG_H_

#include <limits.h>
#include <stddef.h>
#include "ib_explain.h"
#include "json.h"

/* ---------------------------------------------------------------- options.c */
typedef struct {
  int json;   /* --json */
  int params; /* --params */
  int watch;  /* --watch SECONDS, -1 without */
  /* the checks between two nodes (pair.h): --serve | --pair HOST[:P], --port P, --timeout S, --bw */
  int serve;
  const char* pair;
  int port, timeout, bw;
  /* --cluster [--rendezvous HOST:PORT] [--rank R --size N] */
  int cluster;
  const char* rendezvous;
  int rank, size;
  const char* token; /* --token T: the job's shared secret (else the launcher's job id) */
} diagOptions;
/* pair_options.c: the getopt_long codes of --serve, --pair, --port, --timeout and --bw, and
 * their values into o: -1 taken, else the exit status of a usage error. */
enum { DIAG_OPT_SERVE = 512, DIAG_OPT_PAIR, DIAG_OPT_PORT, DIAG_OPT_TIMEOUT, DIAG_OPT_BW, DIAG_OPT_CLUSTER,
       DIAG_OPT_RENDEZVOUS, DIAG_OPT_RANK, DIAG_OPT_SIZE, DIAG_OPT_TOKEN };
int diagPairOption(int opt, const char* value, diagOptions* o);
/* Parses argv into o; returns -1 to go on, else the exit status (--help, usage error). */
int diagParseOptions(int argc, char** argv, diagOptions* o);

/* ---------------------------------------------------------------- report.c */
/* snprintf that truncates silently (long names are cut, never overflow). */
int sfmt(char* buf, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
/* Text output only (a no-op with --json). */
void text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* Starts a section: a "== title" header, or a JSON object under key (closing the previous one). */
void section(const char* key, const char* title);
void sectionEnd(void);
/* Names the section of the findings that follow without a header (--watch). */
void sectionName(const char* key);
/* One finding: printed inline in text mode, gathered for the JSON "findings" array. */
void finding(int problem, const char* fix, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
#define PROBLEM(fix, ...) finding(1, (fix), __VA_ARGS__)
#define WARNING(fix, ...) finding(0, (fix), __VA_ARGS__)
/* The "findings" array, the counts and the summary line; returns the exit status. */
int reportFindings(int watch);

/* ---------------------------------------------------------------- sysfs.c */
extern char sysfsRoot[PATH_MAX];
/* First line of a file, without the newline; 0 on success. */
int readLine(const char* path, char* buf, size_t size);
/* readLine of <sysfsRoot>/<fmt ...>. */
int readSys(char* buf, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- rdma.c */
#define MAX_PORTS 64
/* One port as the IB transport explains it: dev, port, state (4 ACTIVE), selected (discovery
 * takes it), the verdict, the GID choice (see ib_explain.h). */
typedef struct railnetIbPortExplain portInfo;
extern portInfo ports[MAX_PORTS];
extern int nPorts;
/* Fills ports[] (railnetIbExplainPorts), devices by name. */
void scanPorts(void);

/* ---------------------------------------------------------------- the sections */
void sectionInterfaces(void); /* interfaces.c */
void sectionPorts(void);      /* tcp_ports.c */
void sectionRdma(void);       /* rdma.c */
void sectionGids(void);       /* gids.c */
void sectionCounters(void);   /* counters.c */
int watchCounters(int seconds);
void sectionCongestion(void); /* congestion.c */
/* --watch's part for the congestion counters, called by watchCounters: the first sample
 * (returns the RoCE ports watched), one per second (prints growth), the growth over the
 * watch (in the "watch" object; returns whether any grew), and its findings. */
int congestionWatchStart(void);
void congestionWatchTick(int t);
int congestionWatchEnd(int seconds);
void congestionWatchJudge(int seconds);
void sectionGpuDirect(void);  /* gpudirect.c */
void sectionMemlock(void);    /* memlock.c */
void sectionParams(int all);  /* params.c: every param, or (all == 0) those not at their default */
int diagPairMain(const diagOptions* o); /* pair_options.c: --serve / --pair; the exit status */
int clusterMain(const diagOptions* o);  /* cluster.c: --cluster; the exit status */

#endif
