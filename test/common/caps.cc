#include "caps.h"
#include <errno.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

bool dropIpcLock(std::string* why) {
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0);  // fails without CAP_SETPCAP: then nothing to drop anyway
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &hdr, data) != 0) {
    *why = std::string("capget: ") + strerror(errno);
    return false;
  }
  unsigned bit = 1u << (CAP_IPC_LOCK % 32), word = CAP_IPC_LOCK / 32;
  data[word].effective &= ~bit;
  data[word].permitted &= ~bit;
  data[word].inheritable &= ~bit;
  if (syscall(SYS_capset, &hdr, data) != 0) {
    *why = std::string("capset: ") + strerror(errno);
    return false;
  }
  return true;
}
