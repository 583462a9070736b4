/*
 * The Socket transport's wire format: what crosses from one railnet process to another.
 *   - the handle listen hands out, which NCCL's bootstrap carries to the connecting rank;
 *   - each socket's index, sent by the connector after the handshake (an int32_t: 0 ..
 *     nSocks - 1 a data socket, nSocks the control socket);
 *   - the control record at the start of every message on the control socket.
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
#define RAILNET_SOCKET_HANDLE_FIRST_SOCK 4u   /* records flagged RAILNET_SOCKET_REC_FIRST_SOCK: the sender chooses the
                                                 data socket of each message's first chunk */

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
#define RAILNET_SOCKET_REC_FIRST_SOCK 4u /* the payload (on the data sockets) starts on data socket
                                           RAILNET_SOCKET_REC_SOCK(flags), its next chunks on the sockets after it
                                           (modulo nSocks); without it, on the one after the previous message's
                                           last chunk (NCCL's round-robin). Both ends continue from there */
#define RAILNET_SOCKET_REC_SOCK_SHIFT 8 /* bits 8..15 of the flags: that socket's index (0 .. nSocks - 1); zero
                                          without RAILNET_SOCKET_REC_FIRST_SOCK. Bits 16..31 are zero */
#define RAILNET_SOCKET_REC_SOCK(flags) (((flags) >> RAILNET_SOCKET_REC_SOCK_SHIFT) & 0xffu)

/* Control record at the start of each message: its size and tag, then the payload when it
 * is at most NCCL_SOCKET_INLINE bytes, flagged RAILNET_SOCKET_REC_ON_CTRL, or the comm has
 * no data sockets. */
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
#endif

#ifdef __cplusplus
}
#endif
#endif
