/*
 * The Socket transport's helper threads (net_socket_helper.c).
 */
#ifndef RAILNET_NET_SOCKET_HELPER_H
#define RAILNET_NET_SOCKET_HELPER_H

#ifdef __cplusplus
extern "C" {
#endif

/* The thread of one helperThread (arg): moves its sockets' tasks until the comm stops. A
 * failed socket fails the rest of its queue. */
void* railnetSocketHelperMain(void* arg);

#ifdef __cplusplus
}
#endif
#endif
