#include "plugin_loader.h"
#include <limits.h>
#include <unistd.h>

std::string ncclPluginLibName(const std::string& name) {
  char lib[PLUGIN_PATH_MAX];
  pluginLibName(nullptr, name.c_str(), lib, sizeof(lib));
  return lib;
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
  char why[2048];
  void* h = pluginOpen(buildLibDir().c_str(), name.c_str(), nullptr, 0, why, sizeof(why));
  if (h == nullptr && err) *err += std::string(why) + "; ";
  return h;
}
