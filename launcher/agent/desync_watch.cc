#include "launcher/agent/desync_watch.h"

#include <ctime>

#include "common/atomic_file.h"
#include "common/desync/desync_verdict.h"
#include "common/env.h"
#include "common/log.h"
#include "common/regular_file.h"
#include "common/stacks/rank_set.h"
#include "common/stacks/stack_file.h"
#include "common/stacks/stack_reader.h"

#include <dirent.h>
#include <sys/stat.h>

namespace xtimer {
namespace {

// One element of "calls": [comm, comm_size, seq, op, count, dtype, redop, root, site].
bool CallOf(const nlohmann::json& a, desync::Fingerprint* f, std::string* why) {
  if (!a.is_array() || a.size() != 9) return *why = "a call is not an array of 9", false;
  auto uint = [&](size_t i) {
    return a[i].is_number_unsigned() || (a[i].is_number_integer() && a[i].get<int64_t>() >= 0);
  };
  auto int32 = [&](size_t i) {
    return a[i].is_number_integer() && a[i].get<int64_t>() >= INT32_MIN && a[i].get<int64_t>() <= INT32_MAX;
  };
  if (!a[0].is_string() || a[0].get_ref<const std::string&>().empty() || a[0].get_ref<const std::string&>().size() > 64)
    return *why = "the communicator is not a short string", false;
  if (!int32(1) || !uint(2) || a[2].get<uint64_t>() == 0) return *why = "comm_size or seq is not a number", false;
  if (!a[3].is_string() || a[3].get_ref<const std::string&>().size() > 64)
    return *why = "op is not a short string", false;
  if (!uint(4) || !int32(5) || !int32(6) || !int32(7))
    return *why = "count, dtype, redop or root is not a number", false;
  if (!a[8].is_string() || a[8].get_ref<const std::string&>().size() > 512) return *why = "site is not a string", false;
  f->comm = a[0].get<std::string>();
  f->comm_size = a[1].get<int32_t>();
  f->seq = a[2].get<uint64_t>();
  f->op = a[3].get<std::string>();
  f->count = a[4].get<uint64_t>();
  f->dtype = a[5].get<int32_t>();
  f->redop = a[6].get<int32_t>();
  f->root = a[7].get<int32_t>();
  f->site = a[8].get<std::string>();
  return true;
}

}  // namespace

DesyncSettings DesyncSettings::FromEnv() {
  DesyncSettings s;
  s.timeline_path = env::String("XTIMER_TIMELINE_PATH");
  const std::string action = env::String("XTIMER_DESYNC_ACTION");
  s.abort = action == "abort";
  if (action != "abort" && action != "report")
    Log(LogLevel::kWarn, "XTIMER_DESYNC_ACTION=%s is not report or abort; using report", action.c_str());
  return s;
}

size_t DesyncWatch::OnPrints(const nlohmann::json& msg, int64_t now_ms, std::string* why,
                             std::vector<desync::Fingerprint>* kept) {
  auto rank = msg.find("rank");
  auto calls = msg.find("calls");
  if (rank == msg.end() || !rank->is_number_integer() || rank->get<int64_t>() < 0 || rank->get<int64_t>() > INT32_MAX) {
    *why = "no rank";
    return calls != msg.end() && calls->is_array() ? calls->size() : 1;
  }
  if (calls == msg.end() || !calls->is_array()) {
    *why = "\"calls\" is not an array";
    return 1;
  }
  size_t bad = 0;
  std::vector<desync::Fingerprint> good;
  good.reserve(calls->size());
  for (const auto& a : *calls) {
    desync::Fingerprint f;
    std::string w;
    if (CallOf(a, &f, &w)) {
      good.push_back(std::move(f));
    } else if (bad++ == 0) {
      *why = w;
    }
  }
  {
    MutexLock lock(mu_);
    for (const auto& f : good) matcher_.Add(rank->get<int32_t>(), f, now_ms);
  }
  if (kept) *kept = std::move(good);
  return bad;
}

std::string DesyncWatch::VerdictJson(const desync::Mismatch& m, int64_t unix_ms) {
  return desync::VerdictJson(m, unix_ms);
}

std::vector<desync::Mismatch> DesyncWatch::Tick(int64_t now_ms, int64_t unix_ms, std::vector<std::string>* dirs) {
  std::vector<desync::Mismatch> found;
  {
    MutexLock lock(mu_);
    found = matcher_.Take(now_ms);
  }
  for (const desync::Mismatch& m : found) {
    Log(LogLevel::kError, "agent: ranks out of step on communicator %s: %s", m.comm.c_str(), m.Line().c_str());
    if (settings_.timeline_path.empty()) continue;
    std::string dir = settings_.timeline_path + "/desync-" + desync::UtcStamp(unix_ms, "%Y%m%d-%H%M%S") + "-" + m.comm;
    std::string error;
    if (!MakeDirs(dir, &error)) {
      Log(LogLevel::kWarn, "agent: %s; the desync verdict is only in the log", error.c_str());
      continue;
    }
    if (!WriteFileAtomically(dir + "/verdict.json", VerdictJson(m, unix_ms), &error)) {
      Log(LogLevel::kWarn, "agent: cannot write %s/verdict.json: %s", dir.c_str(), error.c_str());
      continue;
    }
    Log(LogLevel::kInfo, "agent: desync verdict in %s/verdict.json", dir.c_str());
    if (dirs) dirs->push_back(dir);
    pending_.push_back(Pending{dir, m, unix_ms, now_ms, {}});
  }
  return found;
}

std::string DesyncWatch::CallSite(const std::vector<PythonFrame>& python) {
  for (auto it = python.rbegin(); it != python.rend(); ++it) {
    const std::string& f = it->file;
    if (f.find("/torch/") != std::string::npos || f.find("/site-packages/xtimer/") != std::string::npos ||
        f.find("/python/xtimer/") != std::string::npos || f.find("/xtimer-site/") != std::string::npos ||
        f.rfind("<frozen", 0) == 0)
      continue;
    const size_t slash = f.rfind('/');
    return it->function + " (" + (slash == std::string::npos ? f : f.substr(slash + 1)) + ":" +
           std::to_string(it->line) + ")";
  }
  return {};
}

void DesyncWatch::AddSites(int64_t now_ms, int64_t wait_ms) {
  if (pending_.empty() || settings_.timeline_path.empty()) return;
  for (auto p = pending_.begin(); p != pending_.end();) {
    size_t wanted = 0;
    for (const desync::Side& s : p->m.sides) wanted += s.ranks.size();
    for (const desync::Side& s : p->m.sides)
      for (int32_t r : s.ranks) {
        if (p->sites.count(r)) continue;
        // <rank:05d>-<world:05d>.stacktrace, written since the verdict.
        char prefix[16];
        std::snprintf(prefix, sizeof prefix, "%05d-", r);
        DIR* d = opendir(settings_.timeline_path.c_str());
        if (d == nullptr) continue;
        std::string path;
        while (dirent* e = readdir(d)) {
          std::string name = e->d_name;
          if (name.rfind(prefix, 0) == 0 && name.size() > 11 && name.substr(name.size() - 11) == ".stacktrace")
            path = settings_.timeline_path + "/" + name;
        }
        closedir(d);
        struct stat st {};
        if (path.empty() || stat(path.c_str(), &st) != 0 || int64_t(st.st_mtime) * 1000 + 999 < p->unix_ms) continue;
        std::string text, why;
        StackFile file;
        if (!ReadRegularFile(path, FileRule{.what = "stack file", .max_bytes = 256 << 20, .follow_links = false}, &text,
                             &why) ||
            !ParseStackFile(text, &file, &why))
          continue;  // being rewritten by the symboliser: the next tick
        for (const StackThread& t : file.threads)
          if (t.main) p->sites[r] = CallSite(t.python);
      }
    if (p->sites.size() < wanted && now_ms - p->since_ms < wait_ms) {
      ++p;
      continue;
    }
    // A side whose calls carried no site (a collective issued from C++, or no Python hooks)
    // gets its first rank's, from its stack: where that rank is now.
    for (desync::Side& s : p->m.sides) {
      if (!s.call.site.empty()) continue;
      for (int32_t r : s.ranks)
        if (auto it = p->sites.find(r); it != p->sites.end() && !it->second.empty()) {
          s.call.site = it->second;
          break;
        }
    }
    nlohmann::ordered_json v = nlohmann::ordered_json::parse(VerdictJson(p->m, p->unix_ms));
    nlohmann::ordered_json where = nlohmann::ordered_json::object();
    for (auto& [r, site] : p->sites) where[std::to_string(r)] = site;
    v["where"] = where;
    std::string error;
    if (!WriteFileAtomically(p->dir + "/verdict.json",
                             v.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", &error))
      Log(LogLevel::kWarn, "agent: cannot add the call sites to %s/verdict.json: %s", p->dir.c_str(), error.c_str());
    Log(LogLevel::kError, "agent: where they are (their stacks): %s", p->m.Line().c_str());
    p = pending_.erase(p);
  }
}

}  // namespace xtimer
