#include "plugin_loader.h"
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

std::string ncclPluginLibName(const std::string& name) {
  if (name.empty()) return "libnccl-net.so";
  return "libnccl-net-" + name + ".so";
}

std::string buildLibDir() {
  char exe[PATH_MAX] = {0};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string dir = n > 0 ? std::string(exe, n) : std::string("build/test/x");
  dir = dir.substr(0, dir.rfind('/'));   // build/test
  dir = dir.substr(0, dir.rfind('/'));   // build
  return dir + "/lib";
}

std::string buildTool(const std::string& tool) {
  std::string lib = buildLibDir();
  return lib.substr(0, lib.rfind('/')) + "/bin/" + tool;
}

void* loadPluginFromBuild(const std::string& name, std::string* err) {
  std::string candidates[] = {buildLibDir() + "/" + ncclPluginLibName(name), name};
  for (auto& c : candidates) {
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    if (err) *err += std::string(dlerror()) + "; ";
  }
  return nullptr;
}
