/*
 * railnet-diag --serve / --pair: the checks between two nodes (railnet-diag's library,
 * tools/diaglib, has the wire format, pairproto.h, and the probes, pairprobe.h).
 *
 *   pair_progress.c the progress line on a terminal (below every other file here)
 *   pair_state.c    this host's side of the check, the TCP probes both sides run
 *   pair_listen.c   the listener both sides run: answers TCP probes, rejects strangers,
 *                   hands a HELLO to the server's session
 *   pair_server.c   --serve: the session with one client, its probes of the client
 *   pair_client.c   --pair: the conversation, this side's TCP probes, the plan and its bound
 *   pair_ports.c    the ephemeral ports: listening on them, probing the peer's, the verdict
 *   pair_rdma.c     the RDMA paths: which to try, both ends of each, GID choice
 *   pair_bw.c       --bw: a short transfer through railnet's transports per working path
 *   pair_report.c   the TCP table, its problems, the verdict, the --bw table
 *   pair_report_rdma.c  the RDMA table, its problems, the IB settings
 */
#ifndef RAILNET_TOOLS_DIAG_PAIR_H_
#define RAILNET_TOOLS_DIAG_PAIR_H_

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include "pairprobe.h"

#define PAIR_PROBE_MS 2000      /* connect + echo bound per TCP path */
#define PAIR_PROBE_BYTES 65536  /* echoed both ways */
#define PAIR_RDMA_MS 3000       /* per RDMA operation set (setup, or write + read) */
#define PAIR_REPLY_MS 5000      /* the peer's answer after its share of a phase */
#define PAIR_BYE_MS 2000        /* the goodbye */
#define PAIR_RDMA_SMALL 4096
#define PAIR_RDMA_BIG (1u << 20)
#define PAIR_MAX_PATHS 256
#define PAIR_BW_MS 10000        /* per --bw measurement (one direction of a path) */
#define PAIR_BW_BYTES (1u << 20)
#define PAIR_BW_COUNT 16
#define PAIR_BW_SIZED_MS 200    /* a first --bw figure faster than this is measured again, sized to take this long */
#define PAIR_BW_AGAIN_MS 4000   /* the bound of that second measurement, all of it */
#define PAIR_MAX_BW 32
#define PAIR_MAX_CONNS 16       /* connections a listener serves at a time */

typedef struct {
  const char* peer; /* --pair HOST[:P] */
  int port;         /* --port, default RAILNET_PAIR_DEFAULT_PORT */
  int timeout;      /* --timeout S (serve), default 120 */
  int bw;           /* --bw */
  uint64_t token;   /* --token T, hashed (pairTokenHash); 0: none, then the server probes only the client's own addresses */
} pairOptions;

/* pair_state.c: a job's token on the wire, FNV-1a of the text (never 0). */
uint64_t pairTokenHash(const char* text);

/* ---------------------------------------------------------------- pair_listen.c */
typedef struct pairListener pairListener;
/* A HELLO arrived on fd (the session owns fd from here). Returns 0 to take it; -1: busy (the
 * listener refuses it with one log line); -2: refused, the callee logged why. Called from
 * the connection's own thread. */
typedef int (*pairHelloFn)(int fd, const railnetPairHello* hello, const char* peer, void* arg);
struct pairListener {
  int fd;
  uint16_t port;
  /* listeners on ephemeral ports, served alike (the ports NCCL's sockets get: the kernel's
   * pick for port 0, the low and high ends of ip_local_port_range); fd -1 / port 0: none */
  int ephFd[RAILNET_PAIR_EPHEMERAL];
  uint16_t ephPort[RAILNET_PAIR_EPHEMERAL];
  uint16_t portLow, portHigh; /* net.ipv4.ip_local_port_range; 0 0 unknown */
  uint64_t token;      /* what it greets every connection with (railnetPairGreet) */
  volatile int stop;
  uint64_t deadlineNs; /* 0: none */
  pairHelloFn onHello; /* NULL: HELLO is refused (the client's listener) */
  void* arg;
  pthread_t thread;
  int threaded;
  int probesAnswered, rejected; /* atomic */
  pthread_mutex_t lock;         /* guards conns */
  pthread_cond_t idle;          /* conns went to 0 */
  int conns;                    /* connections being served */
};
/* Listens on port (tryOthers: any free port when it is taken), and on the ephemeral ports
 * (those that cannot be had are left out); 0 or the errno of port's listener. */
int pairListen(pairListener* l, uint16_t port, int tryOthers);
/* Serves connections until stop or the deadline (in this thread, or in a new one). */
void pairServeLoop(pairListener* l);
/* accept4 (non-blocking, close-on-exec) of a connection on lfd; -1 when none. Out of file
 * descriptors or memory it says so (once in 10 s) and waits 100 ms: the queued connection keeps
 * poll() ready, and retrying at once would spin. */
int pairAccept(int lfd, struct sockaddr* sa, socklen_t* len);
int pairServeInThread(pairListener* l);
void pairListenStop(pairListener* l);
/* One line on stderr, "railnet-diag: ..." (a log of the serving side). */
void pairLog(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---------------------------------------------------------------- pair_rdma.c */
typedef struct {
  int local, remote;            /* entries */
  railnetPairRdmaQp mine, theirs;
  int setupStep, setupErr, setupPeer; /* the failing setup step; setupPeer: on the peer */
  railnetPairRdmaResult out[2]; /* this side writes/reads the peer: small, 1 MiB */
  railnetPairRdmaResult in;     /* the peer writes/reads this side (its report) */
  int tried;
} pairRdmaPath;

/* One --bw path, measured both ways: [0] here -> peer, [1] peer -> here. */
typedef struct {
  char net[8];
  char here[80], peer[80];
  double mbps[2];
  uint32_t usec[2]; /* the transfer's time */
  int err[2];     /* 0: measured */
  char why[2][128];
} pairBw;

/* ---------------------------------------------------------------- the session state */
typedef struct {
  railnetPairHello self, peer;
  char peerName[300];
  railnetPairIface local[RAILNET_PAIR_MAX_IFACES], remote[RAILNET_PAIR_MAX_IFACES];
  int nLocal, nRemote;
  railnetPairTcpResult out[RAILNET_PAIR_MAX_RESULTS], in[RAILNET_PAIR_MAX_RESULTS];
  int nOut, nIn, inReceived;
  railnetPairTcpResult eph[RAILNET_PAIR_EPHEMERAL]; /* here -> the peer's ephemeral ports */
  uint16_t ephPort[RAILNET_PAIR_EPHEMERAL];
  int nEph;
  railnetPairRdmaEntry lr[RAILNET_PAIR_MAX_RDMA], rr[RAILNET_PAIR_MAX_RDMA];
  int nLr, nRr;
  char rdmaWhy[128];
  pairRdmaPath paths[PAIR_MAX_PATHS];
  int nPaths;
  int bw;
  pairBw bwRes[PAIR_MAX_BW];
  int nBw;
  uint64_t endNs;      /* --pair: the end of the whole check, as its plan printed (0: not yet) */
  int quiet;           /* --cluster: nothing printed, the check bounded by rank 0's bound */
  /* a server's session without a job token: it probes only the client's own addresses, the one
   * its connection came from (ctlFamily 4 or 6, ctlAddr) and those on this host's subnets */
  int scoped;
  uint8_t ctlFamily, ctlAddr[16];
} pairState;

/* pair_state.c: this host's side: hello, interfaces, RDMA entries. */
void pairStateInit(pairState* st, const pairListener* l);
/* Every TCP probe from st->local to st->remote (same family) into st->out; progress on a tty. */
void pairProbeTcp(pairState* st, uint16_t peerPort, int timeoutMs, const char* label);
/* One probe from l to r's port within timeoutMs and the check's end (st->endNs, 0: none):
 * past the end it is not run, and one the end cut short that timed out reads the same
 * (RAILNET_PAIR_TCP_BOUND: no verdict on the path); one to an address outside the session's
 * scope (pairProbeInScope) is not run either (RAILNET_PAIR_TCP_SCOPE). */
void pairProbeOne(const pairState* st, const railnetPairIface* l, const railnetPairIface* r, uint16_t port,
                  int timeoutMs, railnetPairTcpResult* out);
int pairTcpPathCount(const pairState* st);
/* 1 when a server may probe the client's address r (st->scoped: only the client's own). */
int pairProbeInScope(const pairState* st, const railnetPairIface* r);
/* A session of a server without a job token: scope its probes to the client's addresses (the
 * address of fd's peer and this host's subnets). */
void pairStateScope(pairState* st, int fd);
/* pair_ports.c (--pair and --cluster): from the first address pair that
 * worked on the peer's service port (NCCL's device 0 first), a probe of each of the peer's
 * ephemeral ports into st->eph; and their part of the TCP section: a PROBLEM when the
 * service port works and an ephemeral one does not (a firewall that passes the one and not
 * the range NCCL's sockets use). */
void pairProbeEphemeral(pairState* st, int timeoutMs);
/* The ephemeral ports probed that failed (a firewall's answer, not a greeting from another
 * program or the check's bound), listed in failed, the first errno in *err; how many. */
int pairEphemeralFailed(const pairState* st, char* failed, size_t size, int* err);
int pairEphemeralReport(const pairState* st); /* 0: an ephemeral port failed */
/* The ephemeral listeners of l (pair_listen.c calls it). */
void pairListenEphemeral(pairListener* l);
/* pair_progress.c: progress on stderr when it is a terminal (text mode); NULL clears the line. */
void pairProgress(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
extern int pairProgressOff; /* --cluster: the checks run quietly */

/* pair_rdma.c */
void pairRdmaList(pairState* st);
int pairRdmaPlan(pairState* st);                           /* fills st->paths; returns the count */
void pairRdmaRunClient(pairState* st, int fd, uint64_t deadlineNs); /* every path, both sides */
/* The server's answers: RDMA_QP and RDMA_RUN (one path at a time). 0 or an errno. */
int pairRdmaServe(pairState* st, int fd, const railnetPairMsg* m, uint64_t deadlineNs);
void pairRdmaServeEnd(void);

/* pair_bw.c: the server's end of one BW_START; the client's measurements of every working
 * chosen path (tcpOk[k]: NCCL's socket device k works both ways); their section. */
int pairBwServe(int fd, const railnetPairBwStart* b, uint64_t sessionDl);
/* --bw: every working path between the transports' devices, both ways (here -> peer, then
 * peer -> here): Socket between each chosen interface here and each chosen interface of the
 * peer that TCP reached, IB on each RDMA path whose two GIDs are the ones railnet uses (the
 * IB transport picks its GID itself); none starts after st->endNs, none ends after it */
void pairBwRunClient(pairState* st, int fd);
/* The number of those paths (the plan's bound counts two measurements each). */
int pairBwTargets(const pairState* st);
/* pair_report.c: the --bw section */
void pairBwReport(const pairState* st);

/* pair_server.c / pair_client.c: exit status */
int pairServe(const pairOptions* o);
int pairClient(const pairOptions* o);
/* --cluster: the pair check (with --bw) against the listener at peer ("HOST:PORT",
 * "[v6]:PORT"), printing nothing, ending within boundMs; st must have been set up by
 * pairStateInit (with this rank's listener). 0, or an errno with why. */
int pairCheckQuiet(pairState* st, const char* peer, uint64_t boundMs, char* why, size_t whySize);
/* --cluster: a pair server that keeps serving (one session at a time) until stopped; its
 * listener on any free port. NULL (errno set) when it cannot listen. */
typedef struct pairServer pairServer;
pairServer* pairServerStart(void);
const pairListener* pairServerListener(const pairServer* sv);
/* --cluster: the job's token; a HELLO without it is refused (and logged). 0: none (--serve). */
void pairServerSetJobToken(pairServer* sv, uint64_t token);
uint64_t pairServerJobToken(const pairServer* sv);
void pairServerStop(pairServer* sv);

/* pair_report.c */
void pairReport(pairState* st);
/* Does TCP work both ways between NCCL's socket device k here and the peer's device k?
 * -1 when one side has no device k. *fail (may be NULL) gets a failing probe. */
int pairTcpDeviceWorks(const pairState* st, int k, const railnetPairTcpResult** fail);
/* The interfaces of one side (0 here, 1 the peer) that work both ways with some interface of
 * the other, as an NCCL_SOCKET_IFNAME value ("=a,b"; "" none). */
void pairWorkingIfaces(const pairState* st, int side, char* buf, size_t size);
/* The likely cause and fix of a failed TCP probe (NULL: none known). */
const char* pairTcpHint(const railnetPairTcpResult* r);
/* pair_report_rdma.c: the RDMA table and its findings; 1 the chosen paths work, 0 they
 * fail, -1 no RDMA on one side. The NCCL_IB_HCA / NCCL_IB_GID_INDEX values for side 0 (here)
 * or 1 (the peer), "" when there is nothing to set. */
int rdmaSection(const pairState* st);
int pairRdmaPathOk(const pairRdmaPath* p); /* set up, and both ways both sizes worked */
void rdmaSettings(const pairState* st, int side, char* hca, size_t hcaSize, char* gid, size_t gidSize);

#endif
