/* NCCL_SOCKET_IFNAME / NCCL_IB_HCA lists: railnetIfListParse and railnetIfListSelects.
 * Input: byte 0 bit 0 = allow ":port" (NCCL_IB_HCA), the rest is the list text. */
#include "fuzz_common.h"
#include "socket.h"

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int allowPort = data[0] & 1;
  char* spec = fuzzString(data + 1, size - 1);
  railnetIfList list;
  memset(&list, 0xa5, sizeof(list)); /* a parser must not rely on a zeroed list */
  ncclResult_t r = railnetIfListParse(spec, allowPort, &list);
  if (r == ncclSuccess) {
    FUZZ_CHECK(list.count >= 0 && list.count <= RAILNET_IFLIST_MAX, "count %d", list.count);
    for (int i = 0; i < list.count; i++) {
      size_t len = strnlen(list.entries[i].name, sizeof(list.entries[i].name));
      FUZZ_CHECK(len > 0 && len < sizeof(list.entries[i].name), "entry %d not terminated or empty", i);
      FUZZ_CHECK(list.entries[i].port == -1 || (allowPort && list.entries[i].port >= 1 && list.entries[i].port <= 255),
                 "entry %d port %d", i, list.entries[i].port);
    }
    static const char* names[] = {"eth0", "ib0", "mlx5_0", "lo", "docker0", "", "e"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
      for (int port = -1; port <= 2; port++) (void)railnetIfListSelects(&list, names[i], port);
    if (list.count > 0) (void)railnetIfListSelects(&list, list.entries[0].name, list.entries[0].port);
  } else {
    FUZZ_CHECK(r == ncclInvalidArgument, "unexpected result %d", (int)r);
  }
  free(spec);
  return 0;
}
