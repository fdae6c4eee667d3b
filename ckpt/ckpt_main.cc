// xtimer_ckpt: look at flash checkpoints.
//   xtimer_ckpt inspect PATH [--entries] [--json] [--no-verify]
//       PATH: a checkpoint folder, a step folder, a .xtc file, a shared-memory folder or a
//       segment (.ctl). Lists what it holds and verifies every checksum. Exit 0 if everything
//       verified, 1 if something is corrupt or incomplete, 2 on usage errors.
//   xtimer_ckpt clean [--shm-dir DIR] [--all]
//       Removes shared-memory segments of this node that no live process owns and whose
//       snapshot is on disk (--all: also those that hold the only copy).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/persist.h"
#include "ckpt/proc.h"
#include "ckpt/segment.h"
#include "common/env.h"

using nlohmann::json;
using namespace xtimer::ckpt;

namespace {

struct Opts {
  bool entries = false, as_json = false, verify = true;
};

std::string Size(uint64_t n) {
  char b[32];
  if (n >= (1ull << 30)) std::snprintf(b, sizeof b, "%.2f GiB", n / 1073741824.0);
  else if (n >= (1ull << 20)) std::snprintf(b, sizeof b, "%.1f MiB", n / 1048576.0);
  else std::snprintf(b, sizeof b, "%llu B", static_cast<unsigned long long>(n));
  return b;
}

std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

uint64_t DataBytes(const Index& idx) {
  uint64_t n = 0;
  for (const Entry& e : idx.entries) n += e.nbytes;
  return n;
}

json EntriesJson(const Index& idx) {
  json a = json::array();
  for (const Entry& e : idx.entries)
    a.push_back({{"name", e.name}, {"dtype", e.dtype}, {"shape", e.shape}, {"device", e.device}, {"nbytes", e.nbytes}});
  return a;
}

void PrintEntries(const Index& idx, const char* indent) {
  size_t w = 4;
  for (const Entry& e : idx.entries) w = std::max(w, e.name.size());
  for (const Entry& e : idx.entries)
    std::printf("%s%-*s  %-9s %-18s %-7s %s\n", indent, static_cast<int>(w), e.name.c_str(), e.dtype.c_str(),
                Shape(e.shape).c_str(), e.device.c_str(), Size(e.nbytes).c_str());
}

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool EndsWith(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// One .xtc file. Returns false if it is corrupt.
bool InspectFile(const std::string& path, const Opts& o, json* out, const char* indent) {
  XtcFile f;
  Status st = XtcFile::Open(path, &f);
  if (st.ok() && o.verify) st = f.Verify();
  json j = {{"path", path}};
  if (!st.ok()) {
    j["ok"] = false;
    j["error"] = st.message();
    if (!o.as_json) std::printf("%s%s: CORRUPT: %s\n", indent, path.c_str(), st.message().c_str());
    out->push_back(j);
    return false;
  }
  const Index& idx = f.index();
  j["ok"] = true;
  j["verified"] = o.verify;
  j["step"] = idx.info.step;
  j["rank"] = idx.info.rank;
  j["world_size"] = idx.info.world_size;
  j["bytes"] = DataBytes(idx);
  if (o.entries) j["entries"] = EntriesJson(idx);
  if (!o.as_json) {
    std::printf("%s%s: step %lld, rank %d of %d, %zu entries, %s%s\n", indent, path.c_str(),
                static_cast<long long>(idx.info.step), idx.info.rank, idx.info.world_size, idx.entries.size(),
                Size(DataBytes(idx)).c_str(), o.verify ? ", verified" : "");
    if (o.entries) PrintEntries(idx, (std::string(indent) + "    ").c_str());
  }
  out->push_back(j);
  return true;
}

// Every .xtc file of a folder; the files of one step must agree on the world size.
bool InspectStepDir(const std::string& dir, const Opts& o, json* out, const char* indent) {
  bool ok = true;
  int world = 0;
  std::string first;
  for (const std::string& n : List(dir)) {
    if (!EndsWith(n, ".xtc")) continue;
    bool good = InspectFile(dir + "/" + n, o, out, indent);
    ok &= good;
    if (!good) continue;
    int w = out->back()["world_size"].get<int>();
    if (world == 0) {
      world = w;
      first = n;
    } else if (w != world) {
      std::string why = n + " says world size " + std::to_string(w) + ", " + first + " says " + std::to_string(world) +
                        " (files of different runs mixed in one folder)";
      out->back()["ok"] = false;
      out->back()["error"] = why;
      if (!o.as_json) std::printf("%s%s/%s: CORRUPT: %s\n", indent, dir.c_str(), n.c_str(), why.c_str());
      ok = false;
    }
  }
  return ok;
}

bool InspectCkptDir(const std::string& dir, const Opts& o, json* out) {
  std::vector<DiskStep> steps;
  Status st = ScanDisk(dir, &steps);
  if (!st.ok()) {
    std::fprintf(stderr, "xtimer_ckpt: %s\n", st.message().c_str());
    return false;
  }
  std::string note;
  int64_t latest = ReadLatest(dir, &note);
  json j = {{"path", dir}, {"latest", latest}, {"steps", json::array()}};
  if (!o.as_json) {
    std::printf("%s: latest %s\n", dir.c_str(), latest >= 0 ? std::to_string(latest).c_str() : "(none)");
    if (!note.empty()) std::printf("  note: %s\n", note.c_str());
  }
  bool ok = true;
  for (const DiskStep& s : steps) {
    json files = json::array();
    if (!o.as_json) {
      if (s.world_size > 0)
        std::printf("  step %lld: %s (%zu of %d ranks)\n", static_cast<long long>(s.step),
                    s.complete ? "complete" : "incomplete", s.ranks.size(), s.world_size);
      else if (!s.ranks.empty())  // the world size comes from a readable file: there is none
        std::printf("  step %lld: unusable (%zu rank file%s, none readable)\n", static_cast<long long>(s.step),
                    s.ranks.size(), s.ranks.size() == 1 ? "" : "s");
      else std::printf("  step %lld: empty (no rank file)\n", static_cast<long long>(s.step));
      if (!s.problem.empty() && s.world_size > 0) std::printf("    CORRUPT: %s\n", s.problem.c_str());
    }
    bool step_ok = InspectStepDir(StepDir(dir, s.step), o, &files, "    ");
    // An incomplete step newer than latest may still be being written; older ones are leftovers.
    if (!s.complete && s.step <= latest) step_ok = false;
    if (!s.problem.empty()) step_ok = false;
    ok &= step_ok;
    json js = {{"step", s.step}, {"complete", s.complete}, {"world_size", s.world_size}, {"files", files}};
    if (!s.problem.empty()) js["error"] = s.problem;
    j["steps"].push_back(js);
  }
  out->push_back(j);
  return ok;
}

const char* OwnerStateName(uint32_t s) {
  switch (s) {
    case kOwnerRunning: return "running";
    case kOwnerClosed: return "closed";
    case kOwnerDied: return "died";
    default: return "none";
  }
}

const char* DiskName(uint32_t d) {
  switch (d) {
    case kDiskWanted: return "wanted on disk, not written yet";
    case kDiskDone: return "on disk";
    case kDiskFailed: return "disk write FAILED";
    default: return "memory only";
  }
}

bool InspectSegment(const std::string& ctl, const Opts& o, json* out) {
  std::unique_ptr<Segment> seg;
  Status st = Segment::Open(ctl, /*writable=*/false, &seg);
  if (!st.ok()) {
    if (!o.as_json) std::printf("%s: %s\n", ctl.c_str(), st.message().c_str());
    out->push_back({{"path", ctl}, {"ok", false}, {"error", st.message()}});
    return false;
  }
  Control* c = seg->ctl();
  uint64_t owner = A(c->owner).load();
  json j = {{"path", ctl},
            {"rank", seg->rank()},
            {"checkpoint_dir", seg->ckpt_dir()},
            {"owner_pid", TagPid(owner)},
            {"owner_state", OwnerStateName(A(c->owner_state).load())},
            {"owner_alive", TagAlive(owner)},
            {"persisted_step", A(c->persisted).load()},
            {"slots", json::array()}};
  if (!o.as_json)
    std::printf("%s: rank %d of %s; process %d (%s%s); on disk up to step %lld\n", ctl.c_str(), seg->rank(),
                seg->ckpt_dir().c_str(), static_cast<int>(TagPid(owner)), OwnerStateName(A(c->owner_state).load()),
                TagAlive(owner) ? ", alive" : ", not running", static_cast<long long>(A(c->persisted).load()));
  bool ok = true;
  int cur = seg->CurrentSlot();
  for (int s = 0; s < 2; ++s) {
    SlotCtl& sc = c->slot[s];
    int64_t step = A(sc.step).load();
    json js = {{"slot", s},
               {"current", s == cur},
               {"step", step},
               {"capacity", A(sc.capacity).load()},
               {"disk", DiskName(A(sc.disk).load())}};
    std::string line = "  slot " + std::to_string(s) + (s == cur ? " (current)" : "") + ": ";
    if (step < 0) {
      line += (A(sc.seq).load() & 1) ? "incomplete (its writer stopped mid-save)" : "empty";
    } else {
      ReadLease lease;
      Status ls = seg->AcquireSlot(s, Holder::kInspect, &lease);
      if (ls.ok() && o.verify) ls = VerifyData(lease.image(), lease.index(), lease.what());
      line += "step " + std::to_string(step) + ", " + DiskName(A(sc.disk).load());
      if (ls.ok()) {
        line += ", " + std::to_string(lease.index().entries.size()) + " entries, " + Size(DataBytes(lease.index())) +
                (o.verify ? ", verified" : "");
        js["bytes"] = DataBytes(lease.index());
        if (o.entries) js["entries"] = EntriesJson(lease.index());
      } else if (ls.code() == Status::Code::kBusy) {
        line += " (busy: " + ls.message() + ")";
      } else {
        line += ": CORRUPT: " + ls.message();
        js["error"] = ls.message();
        // Only the current slot must be good; the other one may be an older, overwritten one.
        if (s == cur) ok = false;
      }
      if (!o.as_json) {
        std::printf("%s\n", line.c_str());
        if (o.entries && ls.ok()) PrintEntries(lease.index(), "      ");
        line.clear();
      }
    }
    if (!o.as_json && !line.empty()) std::printf("%s\n", line.c_str());
    j["slots"].push_back(js);
  }
  j["ok"] = ok;
  out->push_back(j);
  return ok;
}

int Inspect(const std::string& path_in, const Opts& o) {
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  json out = json::array();
  bool ok = true;
  struct stat st;
  if (stat(path.c_str(), &st) != 0 && stat((path + ".ctl").c_str(), &st) == 0) path += ".ctl";
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "xtimer_ckpt: %s does not exist\n", path.c_str());
    return 2;
  }
  if (!S_ISDIR(st.st_mode)) {
    if (EndsWith(path, ".ctl")) ok = InspectSegment(path, o, &out);
    else ok = InspectFile(path, o, &out, "");
  } else {
    std::vector<std::string> names = List(path);
    bool shm = false, steps = false, ranks = false;
    for (const std::string& n : names) {
      shm |= n.rfind("xtimer-ckpt-", 0) == 0 && EndsWith(n, ".ctl");
      steps |= n == "latest" || (IsDir(path + "/" + n) && n.find_first_not_of("0123456789") == std::string::npos);
      ranks |= n.rfind("rank_", 0) == 0 && EndsWith(n, ".xtc");
    }
    if (shm) {
      for (const std::string& n : names)
        if (n.rfind("xtimer-ckpt-", 0) == 0 && EndsWith(n, ".ctl")) ok &= InspectSegment(path + "/" + n, o, &out);
    } else if (steps) {
      ok = InspectCkptDir(path, o, &out);
    } else if (ranks) {
      ok = InspectStepDir(path, o, &out, "");
    } else {
      std::fprintf(stderr, "xtimer_ckpt: %s holds no checkpoint (no steps, .xtc files or segments)\n", path.c_str());
      return 1;
    }
  }
  if (o.as_json) std::printf("%s\n", out.dump(2).c_str());
  return ok ? 0 : 1;
}

int Clean(const std::string& shm_dir, bool all) {
  int removed = 0, kept = 0;
  for (const std::string& n : List(shm_dir)) {
    if (n.rfind("xtimer-ckpt-", 0) != 0 || !EndsWith(n, ".ctl")) continue;
    std::unique_ptr<Segment> seg;
    Status open = Segment::Open(shm_dir + "/" + n, false, &seg);
    if (open.code() == Status::Code::kUntrusted) {
      ++kept;
      std::printf("skipped %s\n", open.message().c_str());
    }
    if (!open.ok()) continue;
    Control* c = seg->ctl();
    int cur = seg->CurrentSlot();
    int64_t step = cur < 0 ? -1 : A(c->slot[cur].step).load();
    bool safe = all || step <= A(c->persisted).load() || A(c->owner_state).load() == kOwnerClosed;
    Status st = safe ? seg->Remove() : Status::Busy("its step " + std::to_string(step) + " is not on disk (use --all)");
    if (st.ok()) {
      ++removed;
      std::printf("removed %s\n", seg->ctl_path().c_str());
    } else {
      ++kept;
      std::printf("kept %s: %s\n", seg->ctl_path().c_str(), st.message().c_str());
    }
  }
  std::printf("%d removed, %d kept\n", removed, kept);
  return 0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: xtimer_ckpt inspect PATH [--entries] [--json] [--no-verify]\n"
               "       xtimer_ckpt clean [--shm-dir DIR] [--all]\n"
               "PATH: checkpoint folder, step folder, .xtc file, shared-memory folder or segment (.ctl)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  std::string cmd = argv[1];
  if (cmd == "inspect") {
    Opts o;
    std::string path;
    for (int i = 2; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--entries") o.entries = true;
      else if (a == "--json") o.as_json = true;
      else if (a == "--no-verify") o.verify = false;
      else if (path.empty() && (a.empty() || a[0] != '-')) path = a;
      else return Usage();
    }
    if (path.empty()) return Usage();
    return Inspect(path, o);
  }
  if (cmd == "clean") {
    std::string shm = xtimer::env::String("XTIMER_CKPT_SHM_DIR");
    bool all = false;
    for (int i = 2; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--all") all = true;
      else if (a == "--shm-dir" && i + 1 < argc) shm = argv[++i];
      else return Usage();
    }
    return Clean(shm, all);
  }
  return Usage();
}
