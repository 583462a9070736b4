/* The Socket transport's connect handle, as another rank (or anything) hands it over:
 * railnetSocketCheckHandle, the check connect() runs before touching the network. A
 * refused handle is also given to connect(), which must refuse it without a comm. The
 * handle is read at an odd address (NCCL's handles are byte arrays). Accepted handles
 * are not connected to: they may name any host. */
#include "fuzz_common.h"
#include "net_socket.h"
#include "railnet.h"
#include "socket.h"

static const ncclNet_t* net;
static void* ctx;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  net = railnetGetNet("socket");
  if (net == NULL || net->init(&ctx, 0, NULL, fuzzLogger, NULL) != ncclSuccess) {
    fprintf(stderr, "socket_handle: the Socket transport did not initialise on lo\n");
    abort();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static _Alignas(16) char storage[NCCL_NET_HANDLE_MAXSIZE + 1];
  char* handle = storage + 1;
  memset(storage, 0, sizeof(storage));
  memcpy(handle, data, size < NCCL_NET_HANDLE_MAXSIZE ? size : NCCL_NET_HANDLE_MAXSIZE);
  ncclResult_t r = railnetSocketCheckHandle(handle);
  if (r == ncclSuccess) {
    /* accepted: the address is a real AF_INET/AF_INET6 one with a port */
    union ncclSocketAddress a;
    memcpy(&a, handle + 16, sizeof(a));
    FUZZ_CHECK(a.sa.sa_family == AF_INET || a.sa.sa_family == AF_INET6, "family %d", a.sa.sa_family);
    return 0;
  }
  FUZZ_CHECK(r == ncclInvalidArgument, "check gave %d", (int)r);
  void* comm = (void*)1;
  ncclNetDeviceHandle_t* dc = NULL;
  r = net->connect(ctx, 0, handle, &comm, &dc);
  FUZZ_CHECK(r == ncclInvalidArgument && comm == NULL, "connect gave %d, comm %p", (int)r, comm);
  return 0;
}
