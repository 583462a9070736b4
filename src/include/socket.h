/*
 * railnet socket layer (NCCL's misc/socket): addresses, interface selection and the
 * ncclSocket used for bootstrap-style connections and by the transports.
 */
#ifndef RAILNET_SOCKET_H
#define RAILNET_SOCKET_H
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MAX_IFS 16
#define MAX_IF_NAME_SIZE 16
#define SOCKET_NAME_MAXLEN (NI_MAXHOST + NI_MAXSERV)

union ncclSocketAddress {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

/* ---------------------------------------------------------------- matcher
 * NCCL_SOCKET_IFNAME / NCCL_IB_HCA syntax: comma-separated prefixes; a leading '^'
 * excludes, a leading '=' (after '^' if both) asks for exact names; with ports
 * allowed, "mlx5_0:1" restricts a device to one port.
 */
#define RAILNET_IFLIST_MAX 32
typedef struct {
  char name[64];
  int port; /* -1: any port */
} railnetIfEntry;

typedef struct {
  railnetIfEntry entries[RAILNET_IFLIST_MAX];
  int count;
  int exclude; /* '^' */
  int exact;   /* '=' */
} railnetIfList;

/* Parses spec into list. allowPort: accept ":port" suffixes. WARNs and returns
 * ncclInvalidArgument on a malformed spec (too many entries, name too long, bad port). */
ncclResult_t railnetIfListParse(const char* spec, int allowPort, railnetIfList* list);
/* Does the list select this name (and port, -1 when not applicable)? Honours '^'. */
int railnetIfListSelects(const railnetIfList* list, const char* name, int port);
/* Is spec set but without a single name ("", "^", "=", ",", "^=, ")? NULL: no. */
int railnetIfListNamesNothing(const char* spec);

/* ---------------------------------------------------------------- interfaces */

/* How ncclFindInterfaces chose (for INFO lines and railnet-diag). */
typedef enum {
  RAILNET_IF_NONE = 0,
  RAILNET_IF_USER,      /* NCCL_SOCKET_IFNAME */
  RAILNET_IF_IB,        /* names starting with "ib" */
  RAILNET_IF_SUBNET,    /* same subnet as NCCL_COMM_ID */
  RAILNET_IF_DEFAULT,   /* anything but docker*, lo, virbr* */
  RAILNET_IF_DOCKER,
  RAILNET_IF_LO,
  RAILNET_IF_VIRBR
} railnetIfStep;
const char* railnetIfStepName(railnetIfStep step);

/* NCCL's ncclFindInterfaces: fills up to maxIfs names (each ifNameMaxSize bytes, packed
 * in ifNames) and addresses; *nIfs gets the count. `step` (may be NULL) says which step
 * of the fallback chain found them. */
ncclResult_t railnetFindInterfaces(char* ifNames, union ncclSocketAddress* ifAddrs, int ifNameMaxSize, int maxIfs,
                                   int* nIfs, railnetIfStep* step);
/* Has railnetFindInterfaces WARNed that the current NCCL_SOCKET_IFNAME selects nothing? Its
 * callers then say their consequence ("no interface", "No IP interface found") as INFO:
 * one cause, one WARN. */
int railnetIfacesSaidNoMatch(void);
ncclResult_t ncclFindInterfaces(char* ifNames, union ncclSocketAddress* ifAddrs, int ifNameMaxSize, int maxIfs,
                                int* nIfs);
/* The interface whose subnet contains remoteAddr (NCCL_COMM_ID's rule). */
ncclResult_t ncclFindInterfaceMatchSubnet(char* ifName, union ncclSocketAddress* localAddr,
                                          const union ncclSocketAddress* remoteAddr, int ifNameMaxSize, int* found);

/* ---------------------------------------------------------------- addresses */

/* "1.2.3.4:5", "[2001:db8::1]:5", "host:5"; WARNs and fails on anything else. */
ncclResult_t ncclSocketGetAddrFromString(union ncclSocketAddress* ua, const char* ipPortPair);
/* "1.2.3.4<5>" style as NCCL prints addresses (numeric host; "<port>"). */
const char* ncclSocketToString(const union ncclSocketAddress* addr, char* buf, int numericHostForm);
/* An address read from a peer's handle: 1 when it is AF_INET/AF_INET6 with a port. `text`
 * (SOCKET_NAME_MAXLEN bytes) receives its printable form, or "(bad family)", for the WARN. */
int railnetSocketAddrUsable(const union ncclSocketAddress* addr, char* text);
/* Byte length of the sockaddr for this family (0 for an unknown family). */
socklen_t railnetSockaddrLen(const union ncclSocketAddress* addr);

/* ---------------------------------------------------------------- sockets */

enum ncclSocketState {
  ncclSocketStateNone = 0,
  ncclSocketStateInitialized,
  ncclSocketStateAccepting,
  ncclSocketStateAccepted,
  ncclSocketStateConnecting,
  ncclSocketStateConnectPolling,
  ncclSocketStateConnected,
  ncclSocketStateReady,
  ncclSocketStateTerminating,
  ncclSocketStateClosed,
  ncclSocketStateError
};

/* Who is on the other end: a connecting peer announces it; accept refuses the wrong type. */
enum ncclSocketType {
  ncclSocketTypeUnknown = 0,
  ncclSocketTypeBootstrap = 1,
  ncclSocketTypeProxy = 2,
  ncclSocketTypeNetSocket = 3,
  ncclSocketTypeNetIb = 4,
  ncclSocketTypeRasNetwork = 5
};

struct ncclSocket {
  int fd;
  int acceptFd;
  int errorRetries;   /* connect attempts so far */
  union ncclSocketAddress addr;
  volatile uint32_t* abortFlag;
  int asyncFlag;
  enum ncclSocketState state;
  int salen;
  uint64_t magic;
  enum ncclSocketType type;
  int customRetry;
  int finalizeCounter; /* bytes of the handshake done so far */
  char finalizeBuffer[sizeof(uint64_t) + sizeof(int)];
  uint64_t connectStartNs; /* first connect attempt */
  uint64_t attemptStartNs; /* current attempt (bounded by a deadline) */
  uint64_t nextAttemptNs;  /* retries wait until then */
  uint64_t acceptStartNs;  /* accepted connection: handshake deadline runs from here */
};

#define NCCL_SOCKET_SEND 0
#define NCCL_SOCKET_RECV 1

ncclResult_t ncclSocketInit(struct ncclSocket* sock, const union ncclSocketAddress* addr, uint64_t magic,
                            enum ncclSocketType type, volatile uint32_t* abortFlag, int asyncFlag);
ncclResult_t ncclSocketListen(struct ncclSocket* sock);
ncclResult_t ncclSocketGetAddr(struct ncclSocket* sock, union ncclSocketAddress* addr);
ncclResult_t ncclSocketConnect(struct ncclSocket* sock);
/* How long a connect to a peer that never answers takes before it fails, in seconds, at
 * the current NCCL_SOCKET_RETRY_CNT and NCCL_SOCKET_RETRY_SLEEP_MSEC: every attempt's
 * deadline plus the growing sleeps between them (94.5 s at NCCL's defaults). */
double railnetSocketConnectBudgetSec(void);
ncclResult_t ncclSocketReady(struct ncclSocket* sock, int* running);
ncclResult_t ncclSocketAccept(struct ncclSocket* sock, struct ncclSocket* listenSock);
/* Non-blocking progress: moves what the socket takes now, adds it to *offset. */
ncclResult_t ncclSocketProgress(int op, struct ncclSocket* sock, void* ptr, int size, int* offset, int* closed);
/* What one railnetSocketProgressV moved. */
struct railnetSocketIo {
  int zerocopy;  /* in: send with MSG_ZEROCOPY (SO_ZEROCOPY set); out: 0 if the kernel refused it
                    (ENOBUFS: pinned pages over RLIMIT_MEMLOCK), the bytes then went by copy */
  int zcSends;   /* out: sendmsg calls that took MSG_ZEROCOPY: each one completion id, in order */
  size_t moved;  /* out: bytes moved */
  int closed;    /* out: the peer closed (or reset) the connection */
};
/* Non-blocking progress over several buffers in one system call at a time (sendmsg/recvmsg):
 * moves what the socket takes now, in order; the iovecs are consumed as bytes move. Stops at
 * the first short transfer (the socket is full or empty). */
struct iovec;
ncclResult_t railnetSocketProgressV(int op, struct ncclSocket* sock, struct iovec* iov, int iovcnt,
                                    struct railnetSocketIo* io);
/* Reads the zero-copy completions waiting in sock's error queue, without blocking: calls
 * done(arg, first, last, copied) for each range of completion ids the kernel released
 * (copied: it copied the bytes after all, as it does on loopback). Returns ranges read. */
int railnetSocketZcReap(struct ncclSocket* sock, void (*done)(void* arg, uint32_t first, uint32_t last, int copied),
                        void* arg);
/* Blocking (with NCCL_SOCKET_POLL_TIMEOUT / progress checks) send/recv of exactly size bytes. */
ncclResult_t ncclSocketSend(struct ncclSocket* sock, void* ptr, int size);
ncclResult_t ncclSocketRecv(struct ncclSocket* sock, void* ptr, int size);
ncclResult_t ncclSocketClose(struct ncclSocket* sock);
/* Whether the peer closed its end (end of stream or a reset) or stopped answering (the peer
 * timeout below ran out), without blocking and without taking any byte: 1 gone, 0 alive or
 * bytes are waiting to be read. *err (when given): the socket's error (ETIMEDOUT, ECONNRESET),
 * 0 for an end of stream. */
int railnetSocketPeerGone(const struct ncclSocket* sock, int* err);
/* RAILNET_SOCKET_TIMEOUT_MSEC: how long a comm's connection may go unacknowledged. */
int64_t railnetSocketPeerTimeoutMs(void);
/* Applies it to connected socket fd (TCP_USER_TIMEOUT, keepalive probes), so that a peer host
 * that vanished without closing (power, link, switch) ends the connection with ETIMEDOUT. */
void railnetSocketSetPeerTimeout(int fd);
/* An accepted connection whose setup (the handshake and what the transport reads after it)
 * is not done RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC after it was accepted: 1, and that time in
 * *ms; the transport drops it and goes on listening. */
int railnetSocketAcceptExpired(const struct ncclSocket* sock, int64_t* ms);
/* RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC: how long an accepted connection's setup step may wait. */
int64_t railnetSocketAcceptTimeoutMs(void);
/* Ends this side's sending (the peer reads end of stream) and keeps the socket open: a comm
 * that failed tells its peer so, which then fails too instead of waiting. */
void railnetSocketShutdownSend(struct ncclSocket* sock);
/* The default magic of railnet's sockets (NCCL_SOCKET_MAGIC overrides). */
uint64_t railnetSocketMagic(void);

#ifdef __cplusplus
}
#endif
#endif
