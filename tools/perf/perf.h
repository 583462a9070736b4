/*
 * railnet-perf's parts: what each file of tools/perf/ offers the others.
 *
 *   main.c       options, then one end (server or client) or both (--loopback)
 *   options.c    the command line, --help, the sizes of the sweep, roles from a launcher's rank
 *   util.c       the clock, dying with a status, whole reads and writes
 *   cuda.c       libcuda by dlopen (--use-cuda) and the data buffers, host or GPU
 *   plugin.c     the net plugin by dlopen, any ABI v8..v12, behind one set of calls
 *   transfer.c   posting and completing messages, the acks both sides stay in step with
 *   ends.c       the comm pairs and their buffers: set-up, checks, tear-down
 *   bandwidth.c  the bandwidth test, both sides
 *   latency.c    the latency test, both sides
 *   server.c     the receiver: settings from the client, then the sweep
 *   client.c     the sender: settings to the server, then the sweep
 *   report.c     the tables, --json (tools/common/json.h) and --csv
 *   handle.c     the listen handle's way to the client: TCP or a file
 *   loopback.c   --loopback: the server in a child process
 *   perf_wire.h  what crosses the wire between the two ends (and its limits)
 */
#ifndef RAILNET_TOOLS_PERF_H_
#define RAILNET_TOOLS_PERF_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <railnet_net/net.h>
#include "launch.h"

#include "perf_wire.h"

/* ---------------------------------------------------------------- options.c */
typedef struct {
  const char* plugin;
  int dev;
  int server, loopback;
  const char* client;
  int port;
  const char* handleFile;
  size_t minSize, maxSize;
  int iters, warmup, window;
  int bw, lat;
  int json, csv;
  int timeoutSec;
  int verbose;
  int abi;   /* 0: newest the plugin exports */
  int recvs; /* buffers (tags) per irecv */
  int comms; /* send/recv comm pairs */
  int cuda;  /* GPU of --use-cuda, -1 without */
  size_t recvSize; /* --recv-size: bytes each irecv buffer posts (0: the message size) */
} perfOptions;
extern perfOptions opt;
/* Parses argv into opt and the sizes of the sweep; returns -1 to go on, else the exit
 * status (0 after --help or --version, 2 after a usage error). */
int perfParseOptions(int argc, char** argv, size_t* sizes, int* nSizes);

/* ---------------------------------------------------------------- util.c */
double nowSec(void);
/* Exit status: 1 a failure; 2 a usage error or a setting this host or plugin cannot run. */
void dieWith(int status, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
#define die(...) dieWith(1, __VA_ARGS__)
extern pid_t serverChild; /* --loopback: the server process, ended when the client dies */
int writeAll(int fd, const void* p, size_t n);
int readAll(int fd, void* p, size_t n);

/* ---------------------------------------------------------------- cuda.c */
/* Loads libcuda.so.1 and makes GPU gpu's primary context current; exits 2 with one line
 * saying what is missing when there is no driver or no such GPU. */
void cudaSetup(int gpu);
void cudaTeardown(void);
int cudaGpu(void); /* the GPU in use, -1: host buffers */
/* Buffers of the data path: host memory, or GPU memory with --use-cuda. */
char* bufAlloc(size_t bytes);
void bufFree(char* p);
void bufWrite(char* dst, const char* host, size_t n);
/* The n bytes at src, readable by the CPU: src itself, or a copy in stage. */
const char* bufRead(char* stage, const char* src, size_t n);
void bufClear(char* p, size_t n);
const char* memoryName(void);

/* ---------------------------------------------------------------- plugin.c */
typedef struct {
  int version;
  void* lib;
  const void* api;
  void* ctx; /* v11+ */
  char path[512];
  const char* name;
} perfNet;
extern perfNet net;
/* Ends the run when a plugin call fails: "RailSocket: connect failed: the peer cannot be
 * reached or failed (ncclRemoteError)", in words; call is the call's text, of which only the
 * name of the function is shown (netConnect: connect). */
void netCallFailed(const char* call, ncclResult_t r) __attribute__((noreturn));
#define NETCALL(call)                            \
  do {                                           \
    ncclResult_t r_ = (call);                    \
    if (r_ != ncclSuccess) netCallFailed(#call, r_); \
  } while (0)
/* What railnet-perf needs of a device's properties, from any version's struct. */
typedef struct {
  const char* name;
  int speed; /* Mb/s */
  int ptrSupport, maxRecvs;
} devProps;
/* NCCL's rule: NCCL_NET_PLUGIN=<name> loads libnccl-net-<name>.so, else <name> itself. */
void loadPlugin(void);
ncclResult_t netInit(void);
ncclResult_t netDevices(int* n);
ncclResult_t netProps(int dev, devProps* out);
ncclResult_t netListen(int dev, void* handle, void** lc);
ncclResult_t netConnect(int dev, void* handle, void** sc);
ncclResult_t netAccept(void* lc, void** rc);
ncclResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mh);
ncclResult_t netDeregMr(void* comm, void* mh);
ncclResult_t netIsend(void* sc, void* data, size_t size, int tag, void* mh, void** req);
/* One irecv of n buffers (NCCL's multi-receive): data[i], sizes[i], tags[i], mh[i]. */
ncclResult_t netIrecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mh, void** req);
ncclResult_t netIflush(void* rc, int n, void** data, int* sizes, void** mh, void** req);
ncclResult_t netTest(void* req, int* done, int* sizes);
void netCloseSend(void* sc);
void netCloseRecv(void* rc);
void netCloseListen(void* lc);
void netFinalize(void);
/* The name of the device in use, for the --json documents. */
const char* deviceName(void);
/* What the device must take for these settings; exit 2 naming the limit otherwise. */
void checkDevice(int recvs, int cuda);

/* ---------------------------------------------------------------- transfer.c */
/* One message: an irecv of `recvs` buffers (tags 0..recvs-1) on the receiver, as many
 * isends with those tags on the sender, all on comm pair `comm`. */
typedef struct {
  void* req[MAX_RECVS];
  int n, comm;
} msgReqs;

/* What test() reported for the messages of one stream. */
typedef struct {
  long long bytes, buffers, messages, badSizes;
} tally;

typedef struct {
  int n;     /* comm pairs */
  int recvs; /* buffers per irecv */
  void* sendComm[MAX_COMMS];
  void* recvComm[MAX_COMMS];
  void* listenComm[MAX_COMMS];
  void* smh[MAX_COMMS];
  void* rmh[MAX_COMMS];
  char *sbuf, *rbuf; /* recvs slots of stride bytes each: host memory or GPU addresses */
  size_t stride;
  char* expect; /* host: what every slot holds (the send pattern) */
  char* stage;  /* host: a slot copied back from the GPU for the check */
  /* Settings, acks and handles travel in host memory on comm pair 0. */
  char ctrlSend[CTRL_SIZE] __attribute__((aligned(64)));
  char ctrlRecv[CTRL_SIZE] __attribute__((aligned(64)));
  void *csmh, *crmh;
  int dataReg, ctrlSendReg, ctrlRecvReg; /* what closeEnds deregisters */
  msgReqs q[MAX_COMMS * NCCL_NET_MAX_REQUESTS];
  double deadline;
} ends;

/* Not done yet: give the transport's threads the core; die past e->deadline. */
void checkDeadline(const ends* e, const char* what);
/* Post until the transport takes the request (a NULL request means "not now"). */
void* postSend(ends* e, int c, void* data, size_t size, void* mh, int tag);
/* One irecv of n buffers of size bytes at base, base + stride, ... */
void* postRecv(ends* e, int c, int n, char* base, size_t stride, size_t size, void* mh);
void waitReq(ends* e, void* req);
void postMsg(ends* e, int isSend, int c, size_t size, msgReqs* m);
void waitMsg(ends* e, int isSend, size_t size, msgReqs* m, tally* t);
/* n messages of size bytes per buffer, message i on comm pair i % e->n, at most window
 * in flight per comm; what test() reported is added to t. When stamps is not NULL,
 * stamps[i] is when message i completed. */
void stream(ends* e, int isSend, size_t size, int n, int window, tally* t, double* stamps);
/* A progress line on stderr (a terminal only) when one size runs for more than 2 s. */
void progress(const char* test, size_t size, int done, int total);
void progressEnd(void);
/* The small messages both sides use to stay in step; the server's carry its counts. */
void sendAck(ends* e, const perfAck* a);
perfAck recvAck(ends* e);

/* ---------------------------------------------------------------- ends.c */
void acceptOn(ends* e, int c, const char* what);
void connectTo(ends* e, int c, void* handle, const char* what);
/* recvs slots of the largest size per direction, registered on every comm of that direction. */
void setupBuffers(ends* e, size_t maxSize);
void clearSlots(ends* e, size_t size);
/* Every slot holds the sender's pattern for its first size bytes. */
int slotsRight(ends* e, size_t size);
void closeEnds(ends* e);

/* ---------------------------------------------------------------- bandwidth.c, latency.c */
/* The client's sweeps: one table each; return the number of sizes the receiver found wrong. */
int clientBandwidth(ends* e, const size_t* sizes, int nSizes, double* stamps);
int clientLatency(ends* e, const size_t* sizes, int nSizes, double* stamps);
/* The server's side of one size: what it received goes into got. */
void serverBandwidth(ends* e, const perfConfig* cfg, size_t size, tally* got);
void serverLatency(ends* e, const perfConfig* cfg, size_t size, tally* got);

/* ---------------------------------------------------------------- server.c, client.c */
int runServer(void* listenComm);
int runClient(char* handle, const size_t* sizes, int nSizes);

/* ---------------------------------------------------------------- report.c */
void printDevice(void);
/* The settings line of both ends' text output. */
void settingsLine(const char* who);
void bwHeader(void);
void bwRow(size_t size, int iters, double peak, double avg, double mpps, long long sent, const perfAck* a);
void latHeader(void);
void latRow(size_t size, int iters, double* t, const perfAck* a);
/* The client's document (--json) or the closing rule of its tables. */
void resultsBegin(const ends* e);
void resultsEnd(void);
/* The server's document (--json) or table: one row per size and test. */
void receivedBegin(const ends* e);
void receivedRow(const char* test, size_t size, const tally* got, int ok);
void receivedEnd(void);

/* ---------------------------------------------------------------- handle.c */
/* Server: hand the handle to one TCP client on opt.port. */
void serveHandleTcp(const char* handle);
void fetchHandleTcp(const char* host, char* handle);
void writeHandleFile(const char* path, const char* handle);
void readHandleFile(const char* path, char* handle);

/* ---------------------------------------------------------------- loopback.c */
/* --loopback: the server in a child process, the client here; the server's output after
 * the client's. */
int runLoopback(const size_t* sizes, int nSizes);

#endif
