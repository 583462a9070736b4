/* The IB transport's connect handle, as another rank (or anything) hands it over:
 * railnetIbCheckHandle, the check connect() runs before it reads anything else from the
 * handle or opens a socket. The handle is read at an odd address (NCCL's handles are byte
 * arrays). Accepted handles carry a usable AF_INET/AF_INET6 address with a port. */
#include "fuzz_common.h"
#include "../src/transport/net_ib/wire.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static _Alignas(16) char storage[NCCL_NET_HANDLE_MAXSIZE + 1];
  char* handle = storage + 1;
  memset(storage, 0, sizeof(storage));
  memcpy(handle, data, size < NCCL_NET_HANDLE_MAXSIZE ? size : NCCL_NET_HANDLE_MAXSIZE);
  struct ncclIbHandle h;
  memcpy(&h, handle, sizeof(h)); /* connect() copies it the same way before use */
  ncclResult_t r = railnetIbCheckHandle(&h);
  if (r != ncclSuccess) {
    FUZZ_CHECK(r == ncclInvalidArgument, "check gave %d", (int)r);
    return 0;
  }
  FUZZ_CHECK(h.handleMagic == RAILNET_IB_HANDLE_MAGIC, "magic %llx", (unsigned long long)h.handleMagic);
  sa_family_t f = h.connectAddr.sa.sa_family;
  FUZZ_CHECK(f == AF_INET || f == AF_INET6, "family %d", f);
  return 0;
}
