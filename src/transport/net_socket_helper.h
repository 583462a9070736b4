/*
 * The Socket transport's helper threads (net_socket_helper.c).
 */
#ifndef RAILNET_NET_SOCKET_HELPER_H
#define RAILNET_NET_SOCKET_HELPER_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct socketComm;

/* Moves data socket s's queued tasks as far as the socket takes them now, if no other thread
 * moves that socket at the moment. Returns 1 if anything moved or finished, 0 if nothing
 * could (queue empty, or the socket would block), -1 if another thread owns the socket. A
 * failed socket fails the rest of its queue. */
int railnetSocketQueueProgress(struct socketComm* c, int s);
/* The chunk size of a payload of `size` bytes on k data sockets whose record has `flags`: an
 * even share of the k sockets, at least the smallest chunk (the receiver's stated one,
 * RAILNET_SOCKET_REC_TASK_SIZE, else this end's NCCL_SOCKET_MIN_TASKSIZE). */
size_t railnetSocketTaskSize(const struct socketComm* c, size_t size, uint32_t flags, int k);
/* Cuts r's payload into tasks on the data sockets of its record's socket set
 * (RAILNET_SOCKET_REC_SOCK_SET; one chunk each, in the order of their indices), or else on
 * consecutive sockets from the comm's next one (NCCL's round-robin), which is then the one
 * after the last (the same on both ends). touched collects the sockets that got one. */
struct socketRequest;
void railnetSocketTasksPost(struct socketComm* c, struct socketRequest* r, uint64_t* touched);
/* One attempt from the caller's thread on socket s; what is left goes to s's helper thread:
 * woken if it sleeps and the socket took nothing (the helper waits for it in poll()), or if
 * it is in an idle comm's long sleep (a busy comm's helper looks every 10 ms anyway). */
void railnetSocketKick(struct socketComm* c, int s);
/* railnetSocketKick on each socket of the bit mask. */
void railnetSocketTasksKick(struct socketComm* c, uint64_t touched);
/* Tells every helper thread of c to end (join them afterwards). */
void railnetSocketHelperStop(struct socketComm* c);
/* The thread of one helperThread (arg): moves its sockets' tasks until the comm stops. */
void* railnetSocketHelperMain(void* arg);

#ifdef __cplusplus
}
#endif
#endif
