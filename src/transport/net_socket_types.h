/*
 * The Socket transport's comms in this process: a comm is one control socket plus nSocks
 * data sockets served by nThreads helper threads; each data socket has a queue of tasks
 * (chunks of messages) in posting order; requests go through the control socket in
 * posting order. Types only: made by net_socket_comm.c and net_socket_connect.c, moved by
 * net_socket_helper.c (data sockets) and net_socket_p2p.c (control socket, requests).
 */
#ifndef RAILNET_NET_SOCKET_TYPES_H
#define RAILNET_NET_SOCKET_TYPES_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "core.h"
#include "socket.h"
#include "net_socket_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MAX_SOCKETS 64
#define MAX_THREADS 16
#define MAX_REQUESTS NCCL_NET_MAX_REQUESTS
/* Bytes of the control stream a receive comm reads ahead at most (records and small payloads
 * of several messages in one system call). */
#define RAILNET_SOCKET_STAGE (16 * 1024)
/* Bytes one send or receive system call moves at most, and the most a receiving helper
 * thread waits to have arrived before poll() wakes it (SO_RCVLOWAT). The kernel holds the
 * socket's lock while it copies: the acknowledgements and segments that arrive meanwhile wait
 * in its backlog, so one copy of megabytes stalls the flow (a veth pair, 2 x 2 helpers, 4 MiB
 * messages: 2.1-2.9 GB/s with calls of up to 1 GiB, 3.8-5.4 with 512 KiB; bench/results/). */
#define RAILNET_SOCKET_SYSCALL_BYTES ((size_t)512 * 1024)
/* A send comm whose payloads may go on the control socket: once that socket is full, or
 * still holds unsent bytes after a send (its flow is slower than the comm: a per-flow rate
 * limit, a small window), this many of the next such payloads take the data sockets (NCCL's
 * layout), so the records of their messages do not queue behind payloads. The kernel takes
 * no new segment once its unsent bytes reach RAILNET_SOCKET_CTRL_PAYLOAD (TCP_NOTSENT_LOWAT):
 * one to two payloads queue at most, plus those posted before the spill began. */
#define RAILNET_SOCKET_CTRL_SPILL 64

/* One chunk of a message on one data socket. */
typedef struct {
  char* data;
  size_t size;
  size_t offset;      /* bytes moved; written by the socket's owner */
  int done;           /* atomic: moved (and, if sent with MSG_ZEROCOPY, released by the kernel), or failed */
  uint64_t reqSeq;    /* the request it belongs to: a slot reused under a request not tested for long was
                         done (slots are reused only after they are done) */
  ncclResult_t result;
  int zc;             /* some of its bytes went with MSG_ZEROCOPY ... */
  uint32_t zcLast;    /* ... the last in the send of this completion id */
  void* phandle;      /* NCCL's profiler parent of the message (NULL: none) */
  void* eh;           /* the chunk's profiler event, started by the helper thread */
  int evStarted;      /* that event was started (the profiler may hand back no handle) */
} socketTask;

/*
 * Tasks of one data socket, in posting order. The tasks not done belong to live requests,
 * one per request at most (MAX_REQUESTS); tasks are done in order, so twice that many slots
 * mean a new task never lands in a slot still in use.
 */
#define TASK_QUEUE_LEN (2 * MAX_REQUESTS)
#define ZC_WINDOW 1024 /* zero-copy sends in flight per socket at most (more go by copy) */
typedef struct {
  socketTask tasks[TASK_QUEUE_LEN];
  /* free-running indices (unsigned: they wrap; TASK_QUEUE_LEN divides 2^32) */
  uint32_t tail;      /* next to post (the caller's thread) */
  uint32_t head;      /* next to move; moved only by the socket's owner */
  uint32_t doneHead;  /* oldest not done: tasks in [doneHead, head) wait for zero-copy completions */
  int owner;          /* atomic: 1 while one thread (a helper or the caller's) moves this socket */
  /* send comms that choose each message's sockets (balance); all but moved belong to the
   * caller's thread (railnetSocketChooseSet) */
  uint64_t planned;   /* payload bytes of the messages posted so far given to this socket */
  uint64_t moved;     /* atomic: payload bytes the socket's owners handed to the kernel */
  uint64_t acked;     /* of those, the peer had acknowledged these when last read (moved - SIOCOUTQ) */
  uint64_t ackedSeen; /* acked, moved and planned at seenNs, the start of the rate's interval */
  uint64_t movedSeen;
  uint64_t plannedSeen;
  uint64_t seenNs;
  double rate;        /* bytes per ns it delivered between samples while busy (0: not measured yet) */
  int stale;          /* rate was measured long ago (it kept up since, or idled) */
  uint64_t ratedNs;   /* when rate was last measured */
  uint64_t probedNs;  /* when it was last given a chunk as a probe (railnetSocketProbeRate) */
  uint64_t probeBytes; /* that chunk's bytes, delivered when acked reaches probeEnd (0: none waits) */
  uint64_t probeEnd;
  /* zero-copy sends (send comms; owned like head): */
  int zc;             /* send with MSG_ZEROCOPY now (SO_ZEROCOPY is set) */
  uint32_t zcNext;    /* completion id of the next zero-copy send */
  uint32_t zcDone;    /* ids below this one were completed by the kernel */
  uint64_t zcEarly[ZC_WINDOW / 64]; /* ids zcDone+1 .. zcDone+ZC_WINDOW-1 completed before zcDone (bit id % ZC_WINDOW) */
  int zcCopied;       /* the kernel copied zero-copy sends of this socket (said once) */
  int lowat;          /* receive comms: the socket's SO_RCVLOWAT as its helper thread last set it (0: not
                         set, the kernel's 1; -1: the kernel refused it, not tried again) */
} taskQueue;

struct socketComm;

typedef struct {
  struct socketComm* comm;
  int first, stride, count; /* data sockets this thread serves: first, first + stride, ... (NCCL: s % nThreads) */
  pthread_t thread;
  int started;
  uint32_t wakeSeq;   /* futex word: bumped to wake the thread */
  int sleeping;       /* atomic: the thread found its queues empty and waits on wakeSeq: 1 for at most
                         10 ms (its comm is busy), 2 for up to a second (idle); 0 awake */
  unsigned seenPosted; /* the comm's posted count when the thread last went to sleep */
} helperThread;


/* REQ_FAILED: a receive whose record failed its checks once the control stream was through;
 * its comm failed, and the next test() says so */
enum { REQ_FREE = 0, REQ_CTRL, REQ_DATA, REQ_FAILED };

typedef struct socketRequest {
  struct socketComm* comm;
  int op;             /* NCCL_SOCKET_SEND or NCCL_SOCKET_RECV */
  int state;
  uint64_t seq;
  char* data;
  size_t size;        /* send: message size; recv: buffer size until the record arrives */
  int tag;
  char* ctrl;         /* record + inline payload, or record + socket set (RAILNET_SOCKET_REC_SOCK_SET) */
  int ctrlLen;        /* bytes of ctrl to move (recv: grows once the size is known) */
  int ctrlOffset;
  int recordParsed;   /* recv: the sender's record has been checked */
  int onCtrl;         /* the payload (larger than inline) travels on the control socket: no data sockets, or
                         RAILNET_SOCKET_REC_ON_CTRL (send: chosen when posted; recv: from the record) */
  char* afterRecord;  /* recv: where the bytes after the record go: the inline payload to data, a socket set
                         (RAILNET_SOCKET_REC_SOCK_SET) to ctrl after the record */
  size_t ctrlDataOffset; /* payload moved on the control socket (onCtrl) */
  int taskSock[MAX_SOCKETS];
  int taskIdx[MAX_SOCKETS];
  int nTasks;
  void* phandle;      /* NCCL's profiler parent (isend's phandle, irecv's phandles[0]) */
  void* eh;           /* the profiler event of what travels on the control socket */
  int ctrlEvent;      /* that event: 0 not yet, 1 started, 2 stopped */
} socketRequest;

typedef struct socketComm {
  struct ncclSocket ctrl;
  struct ncclSocket socks[MAX_SOCKETS];
  taskQueue queues[MAX_SOCKETS];
  int nSocks, nThreads, nextSock;
  helperThread threads[MAX_THREADS];
  int stop;           /* atomic: the helper threads end */
  unsigned posted;    /* atomic: requests cut into tasks so far (the helpers' sign of a busy comm) */
  int inlineSize;
  size_t minTask;     /* smallest chunk: this process's NCCL_SOCKET_MIN_TASKSIZE (NCCL's rule), or in a send comm
                         the size the receiver stated (statedTask) */
  size_t statedTask;  /* RAILNET_SOCKET_MIN_TASKSIZE's chunk size in the receiver's handle (0: none): a send comm
                         flags its records RAILNET_SOCKET_REC_TASK_SIZE, a receive comm cuts those by it */
  int zcMode;         /* RAILNET_SOCKET_ZEROCOPY: 0 off, 1 on, 2 on until the kernel says it copies */
  size_t zcMin;       /* RAILNET_SOCKET_ZEROCOPY_MIN: sends of fewer bytes copy */
  size_t ctrlMax;     /* send: payloads of messages up to this size may go on the control socket (0: the
                         receiver did not offer it, or RAILNET_SOCKET_CTRL_PAYLOAD=0); recv: nonzero if the
                         listener offered it (records may be flagged RAILNET_SOCKET_REC_ON_CTRL) */
  int balanceNext;    /* send, balance: the next data socket whose kernel state a choice reads */
  int chooseFrom;     /* send, balance: the first socket of the next message's round-robin choice */
  int balance;        /* send: the receiver offered RAILNET_SOCKET_HANDLE_SOCK_SET and RAILNET_SOCKET_BALANCE is on:
                         each record names its data sockets, those that would deliver it soonest
                         (net_socket_balance.c); recv: this comm offered it (records may be flagged
                         RAILNET_SOCKET_REC_SOCK_SET) */
  int ctrlSpill;      /* send: this many of the next payloads that could go on the control socket take the
                         data sockets: it was found full, or behind (unsent bytes after a send) */
  int zcCopiedSaid;   /* atomic: the INFO that the kernel copies was logged for this comm */
  int zcLostSaid;     /* atomic: the WARN about missing zero-copy completions was logged */
  socketRequest requests[MAX_REQUESTS];
  char* ctrlBufs;
  uint64_t nextSeq, ctrlSeq;
  /* the request of sequence number s at bySeq[s % MAX_REQUESTS]: the requests in flight span
   * fewer than MAX_REQUESTS numbers, so test() finds the one at the control socket at once */
  socketRequest* bySeq[MAX_REQUESTS];
  char* stage;        /* receive comms: what was read of the control stream and not parsed yet */
  int stageHead, stageTail;
  int failed;
  int isSend;
  char peer[SOCKET_NAME_MAXLEN];
  ncclProfilerCallback_t prof; /* NCCL's profiler callback, from init (NULL: none) */
} socketComm;

#ifdef __cplusplus
}
#endif
#endif
