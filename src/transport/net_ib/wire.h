/*
 * The IB transport's wire format: everything that crosses from one railnet process to
 * another, and the checks (wire.c) every copy received from a peer goes through first.
 *   - the handle listen hands out, which NCCL's bootstrap carries to the connecting rank;
 *   - the connection metadata, exchanged once each way over the comm's ncclSocket;
 *   - the clear-to-send entries the receiver RDMA-writes into the sender's fifo;
 *   - port failover's and recovery's messages over the comm's ncclSocket (resilience/failover.h).
 * A change to any of these is a new RAILNET_IB_META_VERSION (the handle: a new magic); the
 * _Static_asserts below fail the build when a layout moves without one. The peer may be
 * another version, another plugin or garbage: nothing here is trusted before its check.
 */
#ifndef RAILNET_NET_IB_WIRE_H
#define RAILNET_NET_IB_WIRE_H
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>
#include "core.h"
#include "socket.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MAXSUFFIXSIZE 16
#define MAXNAMESIZE (64 + MAXSUFFIXSIZE)
#define NCCL_IB_MAX_DEVS_PER_NIC NCCL_NET_MAX_DEVS_PER_NIC
#define MAX_MERGED_DEV_NAME ((MAXNAMESIZE * NCCL_IB_MAX_DEVS_PER_NIC) + NCCL_IB_MAX_DEVS_PER_NIC)
#define NCCL_NET_IB_MAX_RECVS 8
#define NCCL_IB_MAX_QPS 128
#define RAILNET_IB_HANDLE_MAGIC 0x7261696c4e494232ULL /* "railNIB2": listenGids added */
#define RAILNET_IB_HANDLE_GIDS 2
#define RAILNET_IB_META_MAGIC 0x7261696c4d455441ULL   /* "railMETA" */
#define RAILNET_IB_META_VERSION 3 /* 3: eager messages (eagerRkey, eagerAddr, eagerSize) */
/* Slots of the sender's fifo (and of the receiver's sizes records): one per irecv in flight,
 * at most NCCL_NET_MAX_REQUESTS of them per comm (NCCL's limit). Version 1 had 256. */
#define RAILNET_IB_FIFO_SLOTS NCCL_NET_MAX_REQUESTS
/* The largest message: its size travels in 32-bit fields (the immediate, the sizes records,
 * the receiver's int sizes), so a power of two below INT_MAX, as NCCL's MAX_NET_SIZE. The
 * properties' maxP2pBytes; a larger isend is refused. */
#define RAILNET_IB_MAX_MSG_BYTES (1ull << 30)
/* ncclIbDevInfo.flags of the receiver's first device: it matches receives by the request id
 * the sender puts in the immediate (the sizes then travel in the sizes records) */
#define RAILNET_IB_FLAG_MATCH_BY_ID 0x1
/* ncclIbDevInfo.flags of either side's first device: NCCL_IB_RESILIENCY_PORT_FAILOVER=1 there
 * (the receiver sets it only when the sender did: then the comm fails over, resilience/failover.h) */
#define RAILNET_IB_FLAG_FAILOVER 0x2
/* ncclIbDevInfo.flags of either side's first device: eager messages of an older railnet
 * (without their tag). A receiver now answers it with no eager messages (clear-to-send for
 * everything), so the two never mix. */
#define RAILNET_IB_FLAG_EAGER 0x4
#define RAILNET_IB_EAGER_MAX_BYTES 8192 /* the largest eagerSize */
/* ncclIbDevInfo.flags of the receiver's first device, with RAILNET_IB_FLAG_FAILOVER: foRecAddr /
 * foRecRkeys name its completion records (resilience/failover.h): the sender's last write of each chunk
 * lands there, and a sender failing over reads them with an RDMA READ (0 from older peers:
 * then only the socket exchange says what arrived) */
#define RAILNET_IB_FLAG_FO_RECORDS 0x8
/* ncclIbDevInfo.flags of either side's first device, with RAILNET_IB_FLAG_EAGER: lazy
 * clear-to-send of an older railnet (tagless eager messages; never agreed now). */
#define RAILNET_IB_FLAG_EAGER_RTS 0x10
/* ncclIbDevInfo.flags of either side's first device: eager messages (eager.h). The sender asks
 * (its RAILNET_IB_EAGER_SIZE in eagerSize, its credit words at eagerAddr), the receiver agrees
 * (the smaller size, its ring at eagerAddr). Each message carries a railnetIbEagerHdr before
 * its bytes in a ring slot of eagerSize + 8 bytes rounded up to 64; the clear-to-send is lazy
 * (a request-to-send asks for it) and the receiver's credit write is three words (positions
 * delivered, its clear-to-send mode, where the mode's period began). */
#define RAILNET_IB_FLAG_EAGER_TAGS 0x20
/* ncclIbDevInfo.flags of the sender's first device, with RAILNET_IB_FLAG_EAGER_TAGS: it can send
 * eager messages on a comm that fails over (eager.h: their immediates then carry their fifo
 * position, every eager write is signaled and written again when lost with a port). A
 * receiver of a failover comm agrees to eager messages only with it. */
#define RAILNET_IB_FLAG_EAGER_FO 0x40
/* ncclIbDevInfo.flags of either side's first device, instead of RAILNET_IB_FLAG_EAGER_TAGS:
 * eager messages whose ring the receiver takes from its pool (eager/eager_pool.h) only when
 * its first small messages are about to go eagerly. The sender asks (its size in eagerSize, its
 * credit words at eagerAddr), the receiver agrees (the smaller size; eagerAddr and the eagerRkeys
 * 0: no ring yet). Until the receiver's credit write (struct railnetIbEagerCredit) names a
 * ring, every irecv writes its clear-to-send (the sender holds its mode "every irecv from
 * position 0" from the start) and no message goes eagerly. A railnet with TAGS only (rings
 * made at connect) gets no eager messages from this one, and the reverse. */
#define RAILNET_IB_FLAG_EAGER_POOL 0x80
#define RAILNET_IB_FLAG_EAGER_ANY (RAILNET_IB_FLAG_EAGER | RAILNET_IB_FLAG_EAGER_TAGS | RAILNET_IB_FLAG_EAGER_POOL)

/* The receiver's credit words (RAILNET_IB_FLAG_EAGER_POOL), 64 bytes of the sender's fifo
 * registration at its eagerAddr: the fifo positions delivered, the clear-to-send mode
 * ((position << 1) | every irecv from there writes one; RAILNET_IB_EAGER_CLOSING), where the
 * last "every" period began (the credit write: the first 24 bytes), then the ring's rkey per
 * device of the receiver and its address (the grant write: the last 40 bytes). The grant write
 * goes once, on the QP of the credit writes, before the first credit write, and again before a
 * failover's retold credit write; the sender's mode word is 1 (every irecv from position 0)
 * until a credit write landed, so a mode word other than 1 says the grant (if any: a close
 * before the ring comes in a credit write without one, ringAddr staying 0) landed before it
 * (writes on one QP are placed in order; the bytes of one write are not). The receiver writes
 * these words from its own control memory (the first-message box's comms: also before a ring). */
struct railnetIbEagerCredit {
  uint64_t released;
  uint64_t mode;
  uint64_t modeFrom;
  uint32_t ringRkeys[NCCL_IB_MAX_DEVS_PER_NIC];
  uint64_t ringAddr;
};

/* The receiver's first-message box (RAILNET_IB_FLAG_EAGER_POOL with eagerFirst at both ends):
 * a comm's first small message, when it finds no clear-to-send and no ring named yet, is written
 * there (a railnetIbEagerHdr, then at most RAILNET_IB_EAGER_FIRST_BYTES - 8 bytes; immediate
 * RAILNET_IB_EAGER_FIRST), once per comm. The box sits right after the receiver's sizes records,
 * in their registration (its rkey per device is fifoRkey); the sender writes it from a block of
 * its own control memory. A comm with the box closes its eager messages (a multi-receive) with the
 * exchange even before it has a ring. */
#define RAILNET_IB_EAGER_FIRST_BYTES 256

/* The head of an eager message in its ring slot (or the first-message box); its bytes follow. */
struct railnetIbEagerHdr {
  uint32_t tag;                        /* isend's tag: the receiver checks it against its irecv's */
  uint32_t size;                       /* the message's bytes (the immediate says it too) */
};

/* What listen hands out (inside NCCL_NET_HANDLE_MAXSIZE). Connect's progress is kept in the
 * process, keyed by the handle's address, never read back from the handle. */
struct ncclIbHandle {
  uint64_t handleMagic;                /* RAILNET_IB_HANDLE_MAGIC */
  union ncclSocketAddress connectAddr; /* the listener */
  uint64_t socketMagic;                /* the listener's ncclSocket magic */
  /* NCCL_IB_SUBNET_AWARE_ROUTING: the GIDs of the listener's RoCE ports (zero: none) */
  union ibv_gid listenGids[RAILNET_IB_HANDLE_GIDS];
};

/* Clear-to-send entry: the receiver RDMA-writes one per buffer into the sender's fifo. */
struct ncclIbSendFifo {
  uint64_t addr;
  uint64_t size;
  uint32_t rkeys[NCCL_IB_MAX_DEVS_PER_NIC];
  uint32_t nreqs;
  uint32_t tag;
  uint64_t idx;                        /* fifo position + 1: the entry is valid when it matches */
};

/* Per device, in the connection metadata. */
struct ncclIbDevInfo {
  uint32_t lid;
  uint8_t ibPort;
  uint8_t linkLayer;
  uint8_t mtu;                         /* enum ibv_mtu */
  uint8_t flags;                       /* receiver, devs[0]: RAILNET_IB_FLAG_* (0 from older peers) */
  int32_t gidIndex;
  uint32_t eagerRkey;                  /* receiver of an eager comm: its ring's rkey on this device */
  union ibv_gid gid;
  uint32_t fifoRkey;                   /* sender: its fifo; receiver: its sizes records */
  uint32_t physDev;                    /* the sender's physical device index + 1 (0: not told) */
};

struct ncclIbQpInfo {
  uint32_t qpn;
  int32_t devIndex;                    /* index into the sender's/receiver's vDevice */
  struct ibv_ece ece;
  int32_t eceSupported;
  int32_t pad;
};

/* Exchanged once each way over the comm's ncclSocket. Fixed size; validated on receipt. */
struct ncclIbConnectionMetadata {
  uint64_t magic;                      /* RAILNET_IB_META_MAGIC */
  uint32_t version;
  int32_t ndevs;
  int32_t nqps;
  int32_t splitDataOnQps;
  int32_t tc, sl;
  uint64_t fifoAddr;                   /* sender: its fifo; receiver: its sizes records */
  struct ncclIbDevInfo devs[NCCL_IB_MAX_DEVS_PER_NIC];
  struct ncclIbQpInfo qpInfo[NCCL_IB_MAX_QPS];
  char devName[MAX_MERGED_DEV_NAME - 56];
  /* RAILNET_IB_FLAG_FO_RECORDS: the receiver's completion records (uint64_t
   * [RAILNET_IB_FIFO_SLOTS][RAILNET_IB_FO_MAX_CHUNKS]: record (s, i) holds fifo position + 1 of
   * the last message of slot s whose chunk i arrived) and their rkey per device */
  uint64_t foRecAddr;
  uint32_t foRecRkeys[NCCL_IB_MAX_DEVS_PER_NIC];
  /* RAILNET_IB_FLAG_EAGER_TAGS (eager.h): sender: its credit words (in its fifo's registration)
   * and its RAILNET_IB_EAGER_SIZE; receiver: the size agreed, and with RAILNET_IB_FLAG_EAGER_POOL
   * its first-message box at eagerAddr (0: none) */
  uint64_t eagerAddr;
  uint32_t eagerSize;
  /* RAILNET_IB_FLAG_EAGER_POOL: the first-message box (RAILNET_IB_EAGER_FIRST_BYTES): sender: the
   * bytes of one it can write (0: an older railnet, which neither writes one nor closes its eager
   * messages before a ring); receiver: its box's bytes (0: none) */
  uint32_t eagerFirst;
};

#ifndef __cplusplus
_Static_assert(sizeof(struct ncclIbHandle) <= NCCL_NET_HANDLE_MAXSIZE, "the IB handle must fit NCCL's handle");
_Static_assert(offsetof(struct ncclIbHandle, listenGids) == 48, "the IB handle: railNIB2 layout");
_Static_assert(sizeof(struct ncclIbSendFifo) == 64, "clear-to-send entry: version 1 layout");
_Static_assert(offsetof(struct ncclIbSendFifo, idx) == 56, "clear-to-send entry: version 1 layout");
_Static_assert(sizeof(struct ncclIbDevInfo) == 40, "connection metadata (device): version 1 layout");
_Static_assert(offsetof(struct ncclIbDevInfo, eagerRkey) == 12 && offsetof(struct ncclIbDevInfo, gid) == 16,
               "connection metadata (device): version 3 layout");
_Static_assert(offsetof(struct ncclIbConnectionMetadata, foRecAddr) ==
                   40 + NCCL_IB_MAX_DEVS_PER_NIC * 40 + NCCL_IB_MAX_QPS * 28 + MAX_MERGED_DEV_NAME - 56,
               "connection metadata: completion records after the device name");
_Static_assert(offsetof(struct ncclIbConnectionMetadata, eagerAddr) ==
                   40 + NCCL_IB_MAX_DEVS_PER_NIC * 40 + NCCL_IB_MAX_QPS * 28 + MAX_MERGED_DEV_NAME - 16,
               "connection metadata: version 3 layout");
_Static_assert(sizeof(struct railnetIbEagerHdr) == 8, "eager message header: 8 bytes");
_Static_assert(sizeof(struct railnetIbEagerCredit) == 64 && offsetof(struct railnetIbEagerCredit, ringAddr) == 56,
               "eager credit write: 64 bytes, the ring's address last");
_Static_assert(sizeof(struct ncclIbQpInfo) == 28, "connection metadata (QP): version 1 layout");
_Static_assert(offsetof(struct ncclIbConnectionMetadata, devs) == 40, "connection metadata: version 1 layout");
_Static_assert(sizeof(struct ncclIbConnectionMetadata) ==
                   40 + NCCL_IB_MAX_DEVS_PER_NIC * 40 + NCCL_IB_MAX_QPS * 28 + MAX_MERGED_DEV_NAME,
               "connection metadata: version 1 layout");
#endif

/* Port failover (resilience/failover.h): fixed-size messages over the comm's ncclSocket, once one of
 * the comm's QPs is gone. NOTIFY (receiver -> sender): these QPs failed here. QUERY (sender ->
 * receiver): these QPs are gone, my next fifo position is fifoHead; answer what arrived.
 * STATE (receiver -> sender): each receive in flight and the chunks of it not arrived. In
 * failover comms the immediate of a data write is (id & 0xffffff) | chunk << 24. */
#define RAILNET_IB_FO_MAGIC 0x7261696c464f5631ULL /* "railFOV1" */
#define RAILNET_IB_FO_MAX_CHUNKS 64               /* QPs a message may be split over */
enum {
  RAILNET_IB_FO_NOTIFY = 1,
  RAILNET_IB_FO_QUERY = 2,
  RAILNET_IB_FO_STATE = 3,
  /* port recovery: entries are (QP index, QP number). REQ (sender -> receiver): my new QPs for
   * these gone ones; ACK: yours, connected to mine; NACK: my port is not back; DONE (sender):
   * they passed the alive checks, use them */
  RAILNET_IB_FO_RECOVER_REQ = 4,
  RAILNET_IB_FO_RECOVER_ACK = 5,
  RAILNET_IB_FO_RECOVER_NACK = 6,
  RAILNET_IB_FO_RECOVER_DONE = 7,
  /* path probes (probe.c): entries are (sender's device | receiver's device << 8, QP number).
   * PROBE_REQ (sender -> receiver, once after the connection): my probe QPs; PROBE_ACK:
   * yours, connected to mine */
  RAILNET_IB_FO_PROBE_REQ = 8,
  RAILNET_IB_FO_PROBE_ACK = 9
};
struct railnetIbFoEntry {
  uint64_t id;                         /* fifo position of a receive in flight */
  uint64_t missing;                    /* bit i: chunk i has not arrived */
};
struct railnetIbFoMsg {
  uint64_t magic;                      /* RAILNET_IB_FO_MAGIC */
  uint32_t type;                       /* RAILNET_IB_FO_* */
  uint32_t nEntries;                   /* STATE: entries used */
  uint64_t deadQps[NCCL_IB_MAX_QPS / 64]; /* bit q: QP q is gone */
  uint64_t fifoHead;                   /* QUERY: the sender's next fifo position */
  struct railnetIbFoEntry entries[RAILNET_IB_FIFO_SLOTS];
};
#ifndef __cplusplus
_Static_assert(sizeof(struct railnetIbFoMsg) == 40 + RAILNET_IB_FIFO_SLOTS * 16, "failover message: version 1 layout");
#endif

/* A connect handle, before anything is read from it beyond its bytes (WARN, ncclInvalidArgument). */
ncclResult_t railnetIbCheckHandle(const struct ncclIbHandle* h);
/* A metadata block received from peer (WARN naming the peer on any problem, ncclRemoteError);
 * wantNqps > 0: it must announce that many QPs (the receiver's answer to this sender: its
 * eager ring may be 0, RAILNET_IB_FLAG_EAGER_POOL); 0: a sender's (its credit words must be named). */
ncclResult_t railnetIbCheckMetadata(const struct ncclIbConnectionMetadata* m, const char* peer, int wantNqps);
/* Copy the clear-to-send entries of fifo slot `slots` (NCCL_NET_IB_MAX_RECVS entries as the
 * receiver RDMA-wrote them) for fifo position pos into copy, once all of them have arrived:
 * *nreqs = their number, 0 when the slot is not complete yet. A slot announcing 0 or more
 * than 8 buffers, or entries that disagree on their number or position: a WARN naming the
 * peer and ncclRemoteError. */
ncclResult_t railnetIbFifoTake(const volatile struct ncclIbSendFifo* slots, uint64_t pos,
                               const union ncclSocketAddress* peerAddr, struct ncclIbSendFifo* copy, int* nreqs);
/* The entry of a taken slot (nreqs entries) that an isend of size bytes with tag takes;
 * taken[r]: entry r has its isend already. *match = -1 when no free entry has the tag. An
 * entry smaller than size (ncclInvalidUsage), or without address or without an rkey for one
 * of the receiver's remDevs devices (ncclRemoteError): a WARN naming the peer. */
ncclResult_t railnetIbFifoMatch(const struct ncclIbSendFifo* entries, int nreqs, const int* taken, int remDevs,
                                size_t size, int tag, const union ncclSocketAddress* peerAddr, int* match);
/* The sizes a sender reported for the n buffers of a receive (immediate data or its sizes
 * records) against what irecv posted: negative or larger is a WARN naming the peer and
 * ncclRemoteError (the peer is not railnet's, or it is broken). */
ncclResult_t railnetIbCheckRecvSizes(const size_t* posted, const int* reported, int n,
                                     const union ncclSocketAddress* peerAddr);
/* A failover message from peer on a comm of nqps QPs: its magic, a known type, at most
 * RAILNET_IB_FIFO_SLOTS entries, no QP beyond nqps (a recovery entry's QP index within nqps,
 * a probe entry's two device indexes within NCCL_IB_MAX_DEVS_PER_NIC, and its QP number
 * within 24 bits); WARN naming the peer, ncclRemoteError. The receiving code checks the
 * device indexes against its comm's own devices too (probe.c). */
ncclResult_t railnetIbCheckFoMsg(const struct railnetIbFoMsg* m, int nqps, const char* peer);

#ifdef __cplusplus
}
#endif
#endif
