/*
 * railnet-diag's parts: what each file of tools/diag/ offers the others.
 *
 *   main.c        options, then the sections in order, then the findings report
 *   options.c     the command line and --help
 *   report.c      text output, sections, findings and the closing summary
 *   sysfs.c       files under $SYSFS_PATH and /proc
 *   interfaces.c  interfaces and ncclFindInterfaces' choice
 *   tcp_ports.c   the local TCP port range
 *   ib_ports.c    the RDMA port scan (and NCCL_IB_HCA matching)
 *   ib_gids.c     GID tables: reading and classifying the entries
 *   ib_verbs.c    libibverbs access: the chosen GID index, the DMA-BUF probe
 *   rdma.c        the RDMA ports section
 *   gids.c        the GID tables section
 *   counters.c    port error counters and --watch
 *   congestion.c  RoCE congestion and lossless-fabric counters (hw_counters, ethtool -S)
 *   gpudirect.c   GPUDirect RDMA
 *   memlock.c     RLIMIT_MEMLOCK
 *   params.c      the param table
 * Shared with railnet-perf (tools/common/): json.h, the --json writer; cli.h, the
 * command-line conventions (usage errors, --version).
 *   pair*.c       --serve / --pair: the checks between two nodes (pair.h)
 */
#ifndef RAILNET_TOOLS_DIAG_H_
#define RAILNET_TOOLS_DIAG_H_

#include <limits.h>
#include <stddef.h>
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
} diagOptions;
/* pair_options.c: the getopt_long codes of --serve, --pair, --port, --timeout and --bw, and
 * their values into o: -1 taken, else the exit status of a usage error. */
enum { DIAG_OPT_SERVE = 512, DIAG_OPT_PAIR, DIAG_OPT_PORT, DIAG_OPT_TIMEOUT, DIAG_OPT_BW };
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
int existsSys(const char* rel);

/* ---------------------------------------------------------------- ib_ports.c */
#define MAX_PORTS 64
typedef struct {
  char dev[64];
  int port;
  int state;         /* 4 ACTIVE */
  char stateName[32];
  char phys[32];
  char link[32];
  char rateText[64];
  double gbps;
  char width[16];
  char netdev[64];
  int mtu;
  int selected; /* NCCL_IB_HCA allows it */
} portInfo;
extern portInfo ports[MAX_PORTS];
extern int nPorts;
/* Fills ports[] from <sysfsRoot>/class/infiniband, sorted by device name. */
void scanPorts(void);

/* ---------------------------------------------------------------- ib_gids.c */
#define MAX_GIDS 256
typedef struct {
  int valid;
  unsigned char raw[16];
  char text[48];
  int roceVer; /* 1, 2; 0 unknown */
  char type[32];
  char ndev[32];
} gidEntry;
int gidIsV4(const unsigned char* r);
int gidValid(const unsigned char* r);
/* The GID table of p from sysfs (at most max entries); returns its length. */
int readGids(const portInfo* p, gidEntry* g, int max);

/* ---------------------------------------------------------------- ib_verbs.c */
/* The GID index railnet's IB transport uses for p, by its own rules; -1 on failure. *why says
 * why, *via how the GIDs were read ("libibverbs" or "sysfs"). */
int chooseGid(const portInfo* p, int tblLen, char* why, size_t whySize, const char** via);
/* DMA-BUF on dev with the IB transport's own probe: 1 yes, 0 no, -1 not probed (why). */
int dmaBufOf(const char* dev, char* why, size_t size);

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

#endif
