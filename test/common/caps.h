// Capabilities for tests that must make the kernel enforce a limit on root.
#pragma once
#include <string>

// Drops CAP_IPC_LOCK from every set of this process (it lets root ignore RLIMIT_MEMLOCK).
// Use it in a forked child; false with *why when it could not.
bool dropIpcLock(std::string* why);
