#include "collector/collector_desync.h"

#include <cctype>

#include "common/atomic_file.h"
#include "common/desync/desync_verdict.h"
#include "common/log.h"

namespace xtimer::collector {

size_t DesyncWatch::Add(const google::protobuf::RepeatedPtrField<v1::CallPrint>& prints, int64_t now_ms) {
  if (prints.empty()) return 0;
  size_t bad = 0;
  MutexLock lock(mu_);
  for (const v1::CallPrint& p : prints) {
    bool plain = true;  // the communicator becomes part of a folder name
    for (char c : p.comm()) plain &= std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (!plain || p.rank() < 0 || p.rank() >= (1 << 20) || p.comm().empty() || p.comm().size() > 64 || p.seq() == 0 ||
        p.comm_size() <= 0 || p.op().size() > 64 || p.site().size() > 512) {
      ++bad;
      continue;
    }
    desync::Fingerprint f;
    f.comm = p.comm();
    f.comm_size = p.comm_size();
    f.seq = p.seq();
    f.op = p.op();
    f.count = p.count();
    f.dtype = p.dtype();
    f.redop = p.redop();
    f.root = p.root();
    f.site = p.site();
    matcher_.Add(p.rank(), f, now_ms);
  }
  return bad;
}

std::vector<desync::Mismatch> DesyncWatch::Tick(int64_t now_ms, int64_t unix_ms) {
  std::vector<desync::Mismatch> found;
  {
    MutexLock lock(mu_);
    found = matcher_.Take(now_ms);
  }
  for (const desync::Mismatch& m : found) {
    Log(LogLevel::kError, "collector: ranks out of step on communicator %s: %s", m.comm.c_str(), m.Line().c_str());
    if (out_dir_.empty()) continue;
    std::string dir = out_dir_ + "/desync-" + desync::UtcStamp(unix_ms, "%Y%m%d-%H%M%S") + "-" + m.comm;
    std::string error;
    if (!MakeDirs(dir, &error)) {
      Log(LogLevel::kWarn, "collector: %s; the desync verdict is only in the log", error.c_str());
      continue;
    }
    if (!WriteFileAtomically(dir + "/verdict.json", desync::VerdictJson(m, unix_ms), &error))
      Log(LogLevel::kWarn, "collector: cannot write %s/verdict.json: %s", dir.c_str(), error.c_str());
    else Log(LogLevel::kInfo, "collector: desync verdict in %s/verdict.json", dir.c_str());
  }
  return found;
}

}  // namespace xtimer::collector
