// Helpers shared by the capture tests.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

namespace xtimer::capture::testing {

inline std::string MakeTempDir(const char* tag) {
  // tmpfs when available: a busy disk can stall rename/fsync for many seconds.
  std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string tmpl = base + "/xtimer-" + tag + "-XXXXXX";
  char* dir = mkdtemp(tmpl.data());
  return dir != nullptr ? std::string(dir) : std::string();
}

// A temp folder removed (with what is in it) when the test ends.
class ScopedDir {
 public:
  explicit ScopedDir(const char* tag) : path_(MakeTempDir(tag)) {}
  ~ScopedDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScopedDir(const ScopedDir&) = delete;
  ScopedDir& operator=(const ScopedDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses the stack file at `path`; a discarded value if missing or invalid.
inline nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadFile(path), nullptr, false);
}

// Waits until the file says symbolized: true (the symboliser rewrote it).
inline nlohmann::json WaitSymbolized(const std::string& path, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  nlohmann::json j;
  while (std::chrono::steady_clock::now() < deadline) {
    j = ReadJson(path);
    if (!j.is_discarded() && j.value("symbolized", false)) return j;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return j;
}

// Whether any native frame of thread `t` has a function containing `name`.
inline bool HasNativeFunction(const nlohmann::json& t, const std::string& name) {
  for (const auto& f : t["native"])
    if (f.contains("function") && f["function"].get<std::string>().find(name) != std::string::npos) return true;
  return false;
}

}  // namespace xtimer::capture::testing
