/*
 * The Socket transport's wire format: what crosses from one railnet process to another.
 *   - the handle listen hands out, which NCCL's bootstrap carries to the connecting rank;
 *   - each socket's index, sent by the connector after the handshake (an int32_t: 0 ..
 *     nSocks - 1 a data socket, nSocks the control socket);
 *   - the control record at the start of every message on the control socket, and the
 *     socket set after it (RAILNET_SOCKET_REC_SOCK_SET).
 * Fields are only ever added at the end of the handle (zeros from an older listener mean
 * "none of the newer features"); the record's flags are used only when the receiver's
 * handle offered them. The _Static_asserts fail the build when a layout moves.
 */
#ifndef RAILNET_NET_SOCKET_WIRE_H
#define RAILNET_NET_SOCKET_WIRE_H
#include <stddef.h>
#include <stdint.h>
#include "core.h"
#include "socket.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_SOCKET_HANDLE_MAGIC 0x4b434f534c494152ULL /* "RAILSOCK" */

/* handle flags: what the receiving comm accepts */
#define RAILNET_SOCKET_HANDLE_CTRL_PAYLOAD 1u /* records flagged RAILNET_SOCKET_REC_ON_CTRL */
#define RAILNET_SOCKET_HANDLE_TASK_SIZE 2u    /* records flagged RAILNET_SOCKET_REC_TASK_SIZE: chunks of at least
                                                 taskSize bytes */
/* 4u: retired (an earlier railnet's first-socket offer); never offered, so an earlier sender goes round-robin */
#define RAILNET_SOCKET_HANDLE_SOCK_SET 8u     /* records flagged RAILNET_SOCKET_REC_SOCK_SET: the sender chooses the
                                                 data sockets of each message (offered, and used, only with
                                                 RAILNET_SOCKET_HANDLE_TASK_SIZE) */

typedef struct {
  uint64_t handleMagic;  /* RAILNET_SOCKET_HANDLE_MAGIC: tells a railnet handle from garbage */
  uint64_t socketMagic;  /* the listener's socket handshake magic */
  union ncclSocketAddress addr;
  int32_t nSocks;
  int32_t nThreads;
  uint32_t flags;        /* RAILNET_SOCKET_HANDLE_*; 0 from a listener older than the field */
  uint32_t taskSize;     /* with RAILNET_SOCKET_HANDLE_TASK_SIZE: 1 .. INT32_MAX */
} socketHandle;

/* record flags */
#define RAILNET_SOCKET_REC_ON_CTRL 1u /* the payload (larger than NCCL_SOCKET_INLINE) follows the record on the
                                        control socket, not on the data sockets */
#define RAILNET_SOCKET_REC_TASK_SIZE 2u /* the payload (larger than NCCL_SOCKET_INLINE, on the data sockets) is cut
                                          into chunks of at least the handle's taskSize; without it, of at least
                                          the receiver's own NCCL_SOCKET_MIN_TASKSIZE (NCCL's rule) */
/* every other bit (4u, 16u and up) is zero: 4u and bits 8..15 were an earlier railnet's first socket */
#define RAILNET_SOCKET_REC_SOCK_SET 8u /* (with RAILNET_SOCKET_REC_TASK_SIZE) the payload (on the data sockets)
                                         goes to the sockets of the uint64_t that follows the record on the
                                         control socket (ctrlSockSet); without it, to
                                         the next sockets in turn from the one after the last chunk of the previous
                                         record without it (NCCL's round-robin) */

/* After a record flagged RAILNET_SOCKET_REC_SOCK_SET: bit s set for each data socket s
 * (0 .. nSocks - 1) that carries one chunk. With k bits set the payload is cut into chunks
 * of an even share of k sockets (at least the chunk size the record's flags imply), which
 * must make exactly k chunks; chunk j goes to the socket of the j-th lowest bit. */
typedef uint64_t ctrlSockSet;
/* Control record at the start of each message: its size and tag, then the payload when it
 * is at most NCCL_SOCKET_INLINE bytes, flagged RAILNET_SOCKET_REC_ON_CTRL, or the comm has
 * no data sockets; or its socket set (RAILNET_SOCKET_REC_SOCK_SET). */
typedef struct {
  uint64_t size;
  int32_t tag;
  uint32_t flags;        /* RAILNET_SOCKET_REC_* */
} ctrlRecord;
#ifndef __cplusplus
_Static_assert(sizeof(socketHandle) <= NCCL_NET_HANDLE_MAXSIZE, "socket handle too large");
_Static_assert(offsetof(socketHandle, nSocks) == 16 + sizeof(union ncclSocketAddress), "socket handle layout moved");
_Static_assert(offsetof(socketHandle, flags) == 24 + sizeof(union ncclSocketAddress), "socket handle layout moved");
_Static_assert(offsetof(socketHandle, taskSize) == 28 + sizeof(union ncclSocketAddress), "socket handle layout moved");
_Static_assert(sizeof(ctrlRecord) == 16 && offsetof(ctrlRecord, flags) == 12, "control record layout moved");
_Static_assert(sizeof(ctrlSockSet) == 8, "socket set layout moved");
#endif

#ifdef __cplusplus
}
#endif
#endif
