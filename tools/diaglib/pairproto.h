/*
 * railnet's pair protocol: what `railnet-diag --serve` and `railnet-diag --pair` say to each
 * other over TCP. It carries facts and probe results only; nothing in it is ever executed.
 *
 * A message is a 16-byte header followed by `count` fixed-size records of its type:
 *   u32 magic "RNPR" | u16 version | u16 type | u32 count | u32 length (= count x record size)
 * Every integer is big-endian; every string is a fixed field that must hold a NUL, zero
 * padded after it (so a message has exactly one encoding). The
 * decoder refuses a wrong magic, version or type, a count outside the type's range, a length
 * that is not count x record size, and a string without its NUL.
 *
 * Every connection to a listener starts with the listener's GREET (its token), before the
 * connecting side sends anything.
 * Conversation (the client, --pair, drives; the server, --serve, answers):
 *   C->S HELLO, S->C HELLO          hosts, versions, the port each side answers probes on and
 *                                   the token its listener greets with; its local port range
 *                                   and the ephemeral ports it answers probes on too
 *   C->S IFACES, S->C IFACES        every interface address (name, family, MTU, chosen?)
 *   C->S TCP_PROBE on a new connection from each local address to each server address, once
 *        the server's listener greeted with the server's token; the server echoes `bytes`
 *        bytes back (the client's side of the TCP check); then the same on each of the
 *        server's ephemeral ports from one address that worked
 *   C->S TCP_RUN, S->C TCP_RESULTS  the server probes the client's addresses the same way,
 *                                   within the budget TCP_RUN gives (none: its own bound)
 *   C->S RDMA_PORTS, S->C RDMA_PORTS  every active port x GID of interest
 *   C->S RDMA_QP, S->C RDMA_QP      per path: QP numbers, GIDs, buffers; the server answers
 *                                   with its QP (or the step and errno that failed)
 *   C->S RDMA_RUN, S->C RDMA_RESULT the server writes/reads the client's buffer and reports
 *   C->S BW_START, S->C BW_HANDLE   (--bw) the server listens on one device of a railnet
 *        transport and returns its handle; the client connects and sends; S->C BW_RESULT
 *        (what it received). With `reverse` the other direction: the client listens and
 *        sends its handle in BW_START, the server answers BW_HANDLE (ready, or why not),
 *        connects from its device and sends; S->C BW_RESULT (what it sent)
 *   C->S BYE
 * ERROR may come instead of any answer.
 *
 * railnet-diag --cluster: every rank holds one connection to rank 0 (the rendezvous), over
 * which it says JOIN (its rank, its pair listener); rank 0 then sends, per round, ROUND (the
 * partner's listener and this rank's role: the client runs a pair check against it) and the
 * client of each pair answers LINK (the outcome); DONE ends the run with the verdict's exit
 * status.
 */
#ifndef RAILNET_PAIRPROTO_H
#define RAILNET_PAIRPROTO_H
#include <stddef.h>
#include <stdint.h>
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_PAIR_MAGIC 0x524e5052u /* "RNPR" */
#define RAILNET_PAIR_VERSION 5 /* 3: HELLO with the ephemeral ports, --bw both ways, LINK with both directions;
                                * 4: JOIN and HELLO with the job's token, TCP_RUN with a budget;
                                * 5: the TCP step SCOPE (a server without a token probes only the
                                * client's own addresses) */
#define RAILNET_PAIR_HDR_SIZE 16
#define RAILNET_PAIR_DEFAULT_PORT 18517
#define RAILNET_PAIR_MAX_IFACES 64
#define RAILNET_PAIR_MAX_RESULTS 1024
#define RAILNET_PAIR_MAX_RDMA 64
#define RAILNET_CLUSTER_WIRE_MAX_RANKS 1024
#define RAILNET_PAIR_PROBE_MAX_BYTES (1u << 20)
#define RAILNET_PAIR_EPHEMERAL 3 /* probe listeners on ephemeral ports per side */

enum railnetPairType {
  RAILNET_PAIR_HELLO = 1,
  RAILNET_PAIR_IFACES = 2,
  RAILNET_PAIR_TCP_PROBE = 3,
  RAILNET_PAIR_TCP_RUN = 4,
  RAILNET_PAIR_TCP_RESULTS = 5,
  RAILNET_PAIR_RDMA_PORTS = 6,
  RAILNET_PAIR_RDMA_QP = 7,
  RAILNET_PAIR_RDMA_RUN = 8,
  RAILNET_PAIR_RDMA_RESULT = 9,
  RAILNET_PAIR_BYE = 10,
  RAILNET_PAIR_ERROR = 11,
  RAILNET_PAIR_BW_START = 12,
  RAILNET_PAIR_BW_HANDLE = 13,
  RAILNET_PAIR_BW_RESULT = 14,
  RAILNET_PAIR_GREET = 15,
  RAILNET_CLUSTER_JOIN = 16,
  RAILNET_CLUSTER_ROUND = 17,
  RAILNET_CLUSTER_LINK = 18,
  RAILNET_CLUSTER_DONE = 19,
  RAILNET_PAIR_TYPE_MAX = 19
};
const char* railnetPairTypeName(int type);

typedef struct {
  char host[64];
  char version[32];
  uint16_t probePort;  /* where this side answers TCP_PROBE connections */
  uint16_t flags;      /* RAILNET_PAIR_F_* */
  uint32_t timeoutMs;  /* the per-probe bound this side uses */
  uint64_t listenToken; /* what this side's listener greets every connection with (GREET) */
  /* The ports NCCL's sockets get here: net.ipv4.ip_local_port_range (0 0: unknown), and
   * listeners of this side (same token) on ports of it, as NCCL gets them: the kernel's pick
   * for port 0, and the low and high ends of the range (0: none) */
  uint16_t portLow, portHigh;
  uint16_t ephemeralPorts[RAILNET_PAIR_EPHEMERAL];
  uint64_t jobToken;   /* --cluster: the job's token (a rank's listener serves only its job); 0: none */
} railnetPairHello;
#define RAILNET_PAIR_F_RDMA 1u /* libibverbs loaded and lists devices */

typedef struct {
  char name[16];
  uint8_t family;   /* 4 or 6 */
  uint8_t selected; /* 0, else 1 + its index in ncclFindInterfaces' choice */
  uint8_t up;       /* IFF_UP and IFF_RUNNING */
  uint8_t prefix;
  uint32_t mtu;
  uint8_t addr[16]; /* IPv4 in the first 4 bytes */
} railnetPairIface;

/* The first message on every connection to a pair listener, from the listener: its token
 * (random per process; the HELLO tells it to the peer). A prober sends nothing to an address
 * that does not greet with the peer's token: it probes the peer's own listener only. */
typedef struct {
  uint64_t token;
} railnetPairGreet;

typedef struct {
  uint64_t token;
  uint32_t bytes; /* <= RAILNET_PAIR_PROBE_MAX_BYTES, echoed back */
  char from[16];  /* the sender's interface, for the log */
} railnetPairTcpProbe;

enum railnetPairTcpStep { RAILNET_PAIR_TCP_OK = 0, RAILNET_PAIR_TCP_CONNECT = 1, RAILNET_PAIR_TCP_SEND = 2,
                          RAILNET_PAIR_TCP_RECV = 3, RAILNET_PAIR_TCP_VERIFY = 4, RAILNET_PAIR_TCP_LOCAL = 5,
                          RAILNET_PAIR_TCP_GREET = 6, /* no greeting with the peer's token: nothing sent */
                          RAILNET_PAIR_TCP_BOUND = 7, /* not run: the check's bound was reached before it */
                          RAILNET_PAIR_TCP_SCOPE = 8 /* not run: a server without a token probes only the
                                                      * client's connection address and addresses on its
                                                      * own subnets */ };
const char* railnetPairTcpStepName(int step);

/* TCP_RUN's record (0 or 1 of it): how long the client waits for the server's probes, less
 * its answer's margin; a probe past it is not run (RAILNET_PAIR_TCP_BOUND). */
typedef struct {
  uint32_t budgetMs;
} railnetPairTcpRun;

typedef struct {
  char localIf[16];
  char peerIf[16];
  uint8_t family;
  uint8_t step;   /* railnetPairTcpStep: 0 worked, else the step that failed */
  int32_t err;    /* errno of the failure (ETIMEDOUT for a deadline) */
  uint32_t usec;  /* time the probe took */
  uint8_t localAddr[16];
  uint8_t peerAddr[16];
} railnetPairTcpResult;

typedef struct {
  char dev[64];
  char netdev[16];
  uint8_t port;
  uint8_t linkLayer; /* IBV_LINK_LAYER_* */
  uint8_t roceVer;   /* 1, 2; 0 unknown or empty slot */
  uint8_t isAuto;    /* the index railnet's automatic selection picks */
  int32_t gidIndex;
  uint32_t mtu;      /* active MTU in bytes */
  uint8_t gid[16];
} railnetPairRdmaEntry;

typedef struct {
  uint32_t id;        /* the path, chosen by the client */
  uint16_t entry;     /* the sender's own entry (index into its RDMA_PORTS) */
  uint16_t peerEntry; /* the receiver's entry */
  uint32_t qpn;
  uint32_t psn;
  uint64_t addr;      /* buffer for the peer's RDMA write / read */
  uint32_t rkey;
  uint32_t len;
  uint32_t mtu;       /* enum ibv_mtu */
  int32_t err;        /* 0: set up; else the errno of the step that failed */
  uint8_t step;       /* railnetPairRdmaStep */
  uint8_t gid[16];
  uint16_t lid;
} railnetPairRdmaQp;

enum railnetPairRdmaStep { RAILNET_PAIR_RDMA_OK = 0, RAILNET_PAIR_RDMA_OPEN = 1, RAILNET_PAIR_RDMA_REG = 2,
                           RAILNET_PAIR_RDMA_CREATE = 3, RAILNET_PAIR_RDMA_INIT = 4, RAILNET_PAIR_RDMA_RTR = 5,
                           RAILNET_PAIR_RDMA_RTS = 6, RAILNET_PAIR_RDMA_WRITE = 7, RAILNET_PAIR_RDMA_READ = 8,
                           RAILNET_PAIR_RDMA_VERIFY = 9, RAILNET_PAIR_RDMA_PEER = 10 };
const char* railnetPairRdmaStepName(int step);

typedef struct {
  uint32_t id;
  uint32_t bytes; /* write this much into the peer's buffer and read it back */
} railnetPairRdmaRun;

typedef struct {
  uint32_t id;
  uint8_t step; /* 0 worked */
  int32_t err;
  uint32_t usec;
  uint32_t bytes;
  char why[96];
} railnetPairRdmaResult;

typedef struct {
  int32_t code;
  char text[128];
} railnetPairError;

/* --bw: a short transfer through railnet's own transport (railnetGetNet) on one device. */
#define RAILNET_PAIR_BW_MAX_BYTES (4u << 20)
#define RAILNET_PAIR_BW_MAX_COUNT 1024u
typedef struct {
  char net[16];    /* "socket" or "ib" */
  char dev[64];    /* the server's device (interface or HCA) by name */
  uint8_t port;    /* IB port, 0 for socket */
  uint32_t bytes;  /* per message */
  uint32_t count;  /* messages */
  uint8_t reverse; /* 0: the client sends to the server; 1: the server sends to the client */
  uint8_t handle[128]; /* reverse: the client's listen handle (NCCL_NET_HANDLE_MAXSIZE) */
} railnetPairBwStart;
typedef struct {
  int32_t err;         /* 0: listening; handle is valid */
  uint8_t handle[128]; /* NCCL_NET_HANDLE_MAXSIZE */
  char why[96];
} railnetPairBwHandle;
typedef struct {
  int32_t err;
  uint64_t bytes; /* received (reverse: sent) */
  uint32_t usec;  /* first message posted .. last completed, on the server */
  char why[96];
} railnetPairBwResult;

/* --cluster: rank -> rank 0 on joining. */
typedef struct {
  uint32_t rank;
  uint32_t size;        /* the launcher's */
  char host[64];
  uint16_t listenPort;  /* this rank's pair listener */
  uint64_t listenToken; /* its greeting */
  uint64_t jobToken;    /* the job's token (--token or the launcher's job id, hashed); 0: none */
} railnetClusterJoinMsg;
/* --cluster: rank 0 -> rank, one per round. */
typedef struct {
  uint32_t round;   /* 0 .. rounds - 1 */
  uint32_t rounds;
  int32_t partner;  /* -1: this rank sits the round out */
  uint8_t client;   /* 1: run the pair check against the partner; 0: answer it */
  uint8_t family;   /* the partner's address, as rank 0 saw its connection */
  uint8_t addr[16];
  uint16_t port;    /* the partner's pair listener */
  uint32_t boundMs; /* the check must end within this */
} railnetClusterRoundMsg;
/* --cluster: the client of a pair -> rank 0: the link's outcome. */
typedef struct {
  uint32_t round;
  uint32_t a, b;    /* a: the client */
  int32_t ok;       /* 1 works, 0 fails */
  uint32_t kbps;    /* bandwidth a -> b in KB/s (0: not measured) */
  uint32_t kbpsBack; /* bandwidth b -> a in KB/s (0: not measured) */
  uint32_t usec;    /* the fastest TCP probe from a to b (connect, 64 KiB each way; 0: none worked) */
  uint32_t usecBack; /* the fastest TCP probe from b to a */
  char net[8];      /* the transport of the path measured: "socket", "ib" ("" none) */
  char devA[64];    /* its device on a: "eth0", "mlx5_0:1" */
  char devB[64];    /* its device on b */
  char cause[160];  /* what failed */
  char fix[160];    /* the fix the pair check gives */
} railnetClusterLinkMsg;
typedef struct {
  int32_t exitCode; /* the verdict's: 0 nothing wrong, 1 something is */
} railnetClusterDoneMsg;

typedef struct {
  uint16_t type;
  uint32_t count;
  union {
    railnetPairHello* hello;
    railnetPairIface* ifaces;
    railnetPairTcpProbe* probe;
    railnetPairTcpResult* tcp;
    railnetPairRdmaEntry* rdma;
    railnetPairRdmaQp* qp;
    railnetPairRdmaRun* run;
    railnetPairTcpRun* tcpRun;
    railnetPairRdmaResult* result;
    railnetPairError* error;
    railnetPairBwStart* bwStart;
    railnetPairBwHandle* bwHandle;
    railnetPairBwResult* bwResult;
    railnetPairGreet* greet;
    railnetClusterJoinMsg* join;
    railnetClusterRoundMsg* round;
    railnetClusterLinkMsg* link;
    railnetClusterDoneMsg* done;
    void* any;
  } u; /* count records (malloc'd; railnetPairFree) */
} railnetPairMsg;

/* Wire size of one record of type (0 for types without records or unknown ones). */
size_t railnetPairRecordSize(int type);

/* The header in buf[0..16): on success *type, *count and *length (payload bytes).
 * ncclInvalidArgument with why (>= 128 bytes, may be NULL) for a bad magic, version, type,
 * count or length. */
ncclResult_t railnetPairDecodeHeader(const uint8_t* buf, size_t len, uint16_t* type, uint32_t* count,
                                     uint32_t* length, char* why);
/* Payload of a checked header into msg (records malloc'd). ncclInvalidArgument + why on a
 * string without NUL or a value out of range. */
ncclResult_t railnetPairDecodePayload(uint16_t type, uint32_t count, const uint8_t* buf, size_t len,
                                      railnetPairMsg* msg, char* why);
/* Header and payload of a whole message in buf. */
ncclResult_t railnetPairDecode(const uint8_t* buf, size_t len, railnetPairMsg* msg, char* why);
/* Encodes count records of type into *out (malloc'd, *outLen bytes). */
ncclResult_t railnetPairEncode(uint16_t type, const void* records, uint32_t count, uint8_t** out, size_t* outLen);
void railnetPairFree(railnetPairMsg* msg);

/* ---- over a connected socket, every call bounded by deadlineNs (railnetClockNs) */
/* 0, or the errno (ETIMEDOUT at the deadline, ECONNRESET when the peer closed). */
int railnetPairWriteAll(int fd, const void* buf, size_t len, uint64_t deadlineNs);
int railnetPairReadAll(int fd, void* buf, size_t len, uint64_t deadlineNs);
/* 0 or an errno; EPROTO (why says what) for bytes that are not this protocol. */
int railnetPairSend(int fd, uint16_t type, const void* records, uint32_t count, uint64_t deadlineNs);
int railnetPairRecv(int fd, railnetPairMsg* msg, uint64_t deadlineNs, char* why);
/* railnetPairRecv that also wants a given type: an ERROR message or another type is EPROTO. */
int railnetPairExpect(int fd, uint16_t type, railnetPairMsg* msg, uint64_t deadlineNs, char* why);

/* A message read a piece at a time, so that one peer that sends part of it and then nothing
 * holds no one else: what came so far of one message (at most RAILNET_PAIR_STEP_MAX bytes). */
#define RAILNET_PAIR_STEP_MAX 512
typedef struct {
  uint8_t buf[RAILNET_PAIR_STEP_MAX];
  size_t got;
} railnetPairPartial;
/* Reads, without blocking, what fd has of one message of `type` (p zeroed before the first
 * call): 1 when it is whole (decoded into *msg), 0 while more is to come, -1 when the
 * connection ended or the bytes are not such a message (why, >= 128 bytes, says which). */
int railnetPairRecvStep(int fd, railnetPairPartial* p, uint16_t type, railnetPairMsg* msg, char* why);

#ifdef __cplusplus
}
#endif
#endif
