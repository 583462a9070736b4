/*
 * The socket layer's vectored data path (socket.h): non-blocking sendmsg/recvmsg over
 * several buffers, MSG_ZEROCOPY sends, and the zero-copy completions of the error queue.
 */
#include <errno.h>
#include <time.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "socket.h"

/* Several buffers, zero-copy sends, and what the fast path below leaves: end of stream,
 * EINTR, errors. Out of line, so that the fast path's call stays cheap. */
static __attribute__((noinline)) ncclResult_t progressGeneral(int op, struct ncclSocket* sock, struct iovec* iov,
                                                              int iovcnt, struct railnetSocketIo* io) {
  while (iovcnt > 0 && iov[0].iov_len == 0) iov++, iovcnt--;
  while (iovcnt > 0) {
    size_t want = iov[0].iov_len;
    for (int i = 1; i < iovcnt; i++) want += iov[i].iov_len;
    int zc = op == NCCL_SOCKET_SEND && io->zerocopy;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
    ssize_t n = op == NCCL_SOCKET_RECV ? recvmsg(sock->fd, &m, MSG_DONTWAIT)
                                       : sendmsg(sock->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL | (zc ? MSG_ZEROCOPY : 0));
    if (n > 0) {
      io->moved += (size_t)n;
      io->zcSends += zc;
      size_t left = (size_t)n;
      while (iovcnt > 0 && left >= iov[0].iov_len) {
        left -= iov[0].iov_len;
        iov[0].iov_base = (char*)iov[0].iov_base + iov[0].iov_len;
        iov[0].iov_len = 0;
        iov++, iovcnt--;
      }
      if (iovcnt > 0) {
        iov[0].iov_base = (char*)iov[0].iov_base + left;
        iov[0].iov_len -= left;
      }
      if ((size_t)n < want) return ncclSuccess; /* short: the socket is full (send) or empty (recv) */
      continue;
    }
    if (n == 0 && op == NCCL_SOCKET_RECV) {
      io->closed = 1;
      return ncclSuccess;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && zc && errno == ENOBUFS) {
      io->zerocopy = 0; /* the pages could not be pinned: send by copy */
      continue;
    }
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) {
      io->closed = 1;
      return ncclSuccess;
    }
    char peer[SOCKET_NAME_MAXLEN];
    WARN("Net : %s peer %s failed: %s", op == NCCL_SOCKET_RECV ? "recvmsg from" : "sendmsg to",
         ncclSocketToString(&sock->addr, peer, 1), strerror(errno));
    sock->state = ncclSocketStateError;
    return ncclRemoteError;
  }
  return ncclSuccess;
}

ncclResult_t railnetSocketProgressV(int op, struct ncclSocket* sock, struct iovec* iov, int iovcnt,
                                    struct railnetSocketIo* io) {
  if (sock == NULL || sock->fd < 0 || io == NULL || iovcnt < 0) return ncclInvalidArgument;
  io->closed = 0;
  io->moved = 0;
  io->zcSends = 0;
  if (iovcnt == 1 && iov[0].iov_len > 0 && !(op == NCCL_SOCKET_SEND && io->zerocopy)) {
    /* the common small case: one buffer, one plain send/recv */
    ssize_t n = op == NCCL_SOCKET_RECV ? recv(sock->fd, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT)
                                       : send(sock->fd, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      io->moved = (size_t)n;
      iov[0].iov_base = (char*)iov[0].iov_base + n;
      iov[0].iov_len -= (size_t)n;
      return ncclSuccess; /* whole, or short: the socket is full (send) or empty (recv) */
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
  }
  return progressGeneral(op, sock, iov, iovcnt, io);
}

int railnetSocketZcReap(struct ncclSocket* sock, void (*done)(void* arg, uint32_t first, uint32_t last, int copied),
                        void* arg) {
  int ranges = 0;
  for (;;) {
    char control[128];
    struct msghdr m = {.msg_control = control, .msg_controllen = sizeof(control)};
    if (recvmsg(sock->fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
      if (errno == EINTR) continue;
      return ranges; /* EAGAIN: nothing more waits */
    }
    for (struct cmsghdr* cm = CMSG_FIRSTHDR(&m); cm != NULL; cm = CMSG_NXTHDR(&m, cm)) {
      int ip = (cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
               (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR);
      if (!ip) continue;
      struct sock_extended_err ee;
      memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
      if (ee.ee_errno != 0 || ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      done(arg, ee.ee_info, ee.ee_data, (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0);
      ranges++;
    }
  }
}
