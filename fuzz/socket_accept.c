/* The ncclSocket accept handshake: anything that reaches a listening port sends bytes
 * (here: the input, then EOF). ncclSocketAccept must accept exactly the inputs that
 * start with the magic and the socket type, and drop every other one, never hang.
 * Input: the bytes the client sends (at most 64 are sent). */
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>
#include "fuzz_common.h"
#include "socket.h"

static struct ncclSocket listener;
static union ncclSocketAddress addr;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  memset(&addr, 0, sizeof(addr));
  addr.sin.sin_family = AF_INET;
  addr.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (ncclSocketInit(&listener, &addr, railnetSocketMagic(), ncclSocketTypeNetSocket, NULL, 1) != ncclSuccess ||
      ncclSocketListen(&listener) != ncclSuccess || ncclSocketGetAddr(&listener, &addr) != ncclSuccess) {
    fprintf(stderr, "socket_accept: cannot listen on loopback\n");
    abort();
  }
  return 0;
}

/* Abortive close: no TIME_WAIT left behind by a million connections. */
static void closeHard(int fd) {
  struct linger lg = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64) size = 64;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "socket");
  int err = fuzzConnect(fd, &addr.sa, sizeof(addr.sin));
  FUZZ_CHECK(err == 0, "connect to the listener failed: %s", strerror(err));
  if (size > 0) FUZZ_CHECK(send(fd, data, size, MSG_NOSIGNAL) == (ssize_t)size, "send");
  shutdown(fd, SHUT_WR);

  uint64_t magic = railnetSocketMagic();
  int type = ncclSocketTypeNetSocket;
  int valid = size >= 12 && memcmp(data, &magic, 8) == 0 && memcmp(data + 8, &type, 4) == 0;

  struct ncclSocket acc;
  memset(&acc, 0, sizeof(acc));
  acc.fd = acc.acceptFd = -1;
  uint64_t deadline = railnetClockNs() + 5000000000ull;
  int accepted = 0, dropped = 0;
  while (!accepted && !dropped) {
    FUZZ_CHECK(railnetClockNs() < deadline, "no answer to %zu handshake bytes in 5 s (valid %d)", size, valid);
    FUZZ_CHECK(ncclSocketAccept(&acc, &listener) == ncclSuccess, "accept failed");
    int ready = 0;
    FUZZ_CHECK(ncclSocketReady(&acc, &ready) == ncclSuccess, "ready failed");
    if (ready) {
      accepted = 1;
      break;
    }
    /* dropped: the server closed our connection */
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) dropped = 1;
    else if (acc.state == ncclSocketStateAccepting || acc.state == ncclSocketStateAccepted) {
      struct pollfd p = {.fd = fd, .events = POLLIN};
      poll(&p, 1, 1);
    }
  }
  FUZZ_CHECK(accepted == valid, "%zu bytes: accepted %d, but a valid handshake is %d", size, accepted, valid);
  closeHard(fd);
  if (accepted) ncclSocketClose(&acc);
  return 0;
}
