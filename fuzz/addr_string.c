/* Address strings (NCCL_COMM_ID style "ip:port", "[ipv6]:port", "host:port"):
 * ncclSocketGetAddrFromString, then ncclSocketToString on what it accepted.
 * Name resolution is replaced below: a fuzzer must not send DNS queries. */
#include <netdb.h>
#include <arpa/inet.h>
#include "fuzz_common.h"
#include "socket.h"

/* Only "localhost" resolves; anything else is unknown. Overrides libc's (and the
 * sanitizer's weak interceptor) in this binary only. */
int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints, struct addrinfo** res) {
  (void)service;
  (void)hints;
  if (node == NULL || strcmp(node, "localhost") != 0) return EAI_NONAME;
  struct addrinfo* ai = (struct addrinfo*)calloc(1, sizeof(*ai) + sizeof(struct sockaddr_in));
  if (ai == NULL) return EAI_MEMORY;
  struct sockaddr_in* sin = (struct sockaddr_in*)(ai + 1);
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ai->ai_family = AF_INET;
  ai->ai_socktype = SOCK_STREAM;
  ai->ai_addr = (struct sockaddr*)sin;
  ai->ai_addrlen = sizeof(*sin);
  *res = ai;
  return 0;
}
void freeaddrinfo(struct addrinfo* res) { free(res); }

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char* s = fuzzString(data, size);
  union ncclSocketAddress ua;
  ncclResult_t r = ncclSocketGetAddrFromString(&ua, s);
  if (r == ncclSuccess) {
    int fam = ua.sa.sa_family;
    FUZZ_CHECK(fam == AF_INET || fam == AF_INET6, "family %d accepted", fam);
    FUZZ_CHECK(railnetSockaddrLen(&ua) > 0, "no length");
    char buf[SOCKET_NAME_MAXLEN];
    ncclSocketToString(&ua, buf, 1);
    FUZZ_CHECK(strlen(buf) < sizeof(buf), "unterminated");
  } else {
    FUZZ_CHECK(r == ncclInvalidArgument, "unexpected result %d", (int)r);
  }
  free(s);
  return 0;
}
