/*
 * The Socket transport's helper threads (net_socket_helper.c).
 */
#ifndef RAILNET_NET_SOCKET_HELPER_H
#define RAILNET_NET_SOCKET_HELPER_H

#ifdef __cplusplus
extern "C" {
#endif

struct socketComm;

/* Moves data socket s's queued tasks as far as the socket takes them now, if no other thread
 * moves that socket at the moment. Returns 1 if anything moved or finished, 0 if nothing
 * could (queue empty, or the socket would block), -1 if another thread owns the socket. A
 * failed socket fails the rest of its queue. */
int railnetSocketQueueProgress(struct socketComm* c, int s);
/* Wakes the helper thread of data socket s after the caller's thread left work in s's queue:
 * always if it sleeps and stuck (the socket took nothing: the helper waits for it in poll()),
 * else only from its long sleep of an idle comm (its 10 ms look covers the rest). */
void railnetSocketHelperWake(struct socketComm* c, int s, int stuck);
/* Tells every helper thread of c to end (join them afterwards). */
void railnetSocketHelperStop(struct socketComm* c);
/* The thread of one helperThread (arg): moves its sockets' tasks until the comm stops. */
void* railnetSocketHelperMain(void* arg);

#ifdef __cplusplus
}
#endif
#endif
