#include "slowdown/steps_folder.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "common/regular_file.h"
#include "common/steps/step_json.h"

namespace xtimer {
namespace {

constexpr size_t kMaxLine = 1 << 20;
constexpr const char* kSuffix = ".steps.jsonl";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Seconds(double t) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f", t);
  return buf;
}

// The records of [first, end) that are more than kLoneStepSeconds from every other step of their
// rank there, when that rank has steps there that are not alone: true at their index - first.
std::vector<char> LoneSteps(const std::vector<slowdown::StepRecord>& records, size_t first) {
  std::vector<char> lone(records.size() - first, 0);
  std::map<int32_t, std::vector<size_t>> by_rank;
  for (size_t i = first; i < records.size(); ++i) by_rank[records[i].rank].push_back(i);
  for (auto& [rank, index] : by_rank) {
    std::stable_sort(index.begin(), index.end(),
                     [&](size_t a, size_t b) { return records[a].t_begin < records[b].t_begin; });
    auto far = [&](size_t a, size_t b) { return records[b].t_begin - records[a].t_begin > kLoneStepSeconds; };
    std::vector<size_t> alone;
    for (size_t k = 0; k < index.size(); ++k)
      if ((k == 0 || far(index[k - 1], index[k])) && (k + 1 == index.size() || far(index[k], index[k + 1])))
        alone.push_back(index[k]);
    if (alone.size() == index.size()) continue;  // nothing to hold on to
    for (size_t i : alone) lone[i - first] = 1;
  }
  return lone;
}

// One writer of a rank: one file's steps of it from one node and pid.
struct Writer {
  uint32_t file = 0;
  int32_t rank = 0;
  std::string node;
  int64_t pid = 0;
  size_t steps = 0;
  uint64_t first_line = 0, last_line = 0;
  double begin = std::numeric_limits<double>::infinity(), end = -std::numeric_limits<double>::infinity();
  bool kept = true;
};

std::string Describe(const StepsInput& in, const Writer& w) {
  return in.paths[w.file] + " (lines " + std::to_string(w.first_line) + "-" + std::to_string(w.last_line) + ": " +
         std::to_string(w.steps) + " step" + (w.steps == 1 ? "" : "s") + " of node " + w.node + ", pid " +
         std::to_string(w.pid) + ")";
}

// Keeps one writer of a rank where two overlap in time (steps_folder.h); one line for each left out.
void DropSecondWriters(StepsInput* in) {
  std::vector<Writer> writers;
  std::map<std::tuple<uint32_t, int32_t, std::string, int64_t>, size_t> index;
  std::vector<size_t> writer_of(in->records.size());
  size_t last = SIZE_MAX;
  for (size_t i = 0; i < in->records.size(); ++i) {
    const slowdown::StepRecord& r = in->records[i];
    const StepsInput::Origin& o = in->origins[i];
    if (last == SIZE_MAX || writers[last].file != o.file || writers[last].rank != r.rank ||
        writers[last].pid != r.pid || writers[last].node != r.node) {
      auto [it, added] = index.try_emplace({o.file, r.rank, r.node, r.pid}, writers.size());
      if (added)
        writers.push_back(Writer{.file = o.file, .rank = r.rank, .node = r.node, .pid = r.pid, .first_line = o.line});
      last = it->second;
    }
    Writer& w = writers[last];
    ++w.steps;
    w.last_line = o.line;
    w.begin = std::min(w.begin, r.t_begin);
    w.end = std::max(w.end, r.t_end);
    writer_of[i] = last;
  }
  std::map<int32_t, std::vector<size_t>> by_rank;
  for (size_t k = 0; k < writers.size(); ++k) by_rank[writers[k].rank].push_back(k);
  bool dropped = false;
  for (auto& [rank, ws] : by_rank) {
    if (ws.size() < 2) continue;
    // More steps first, then file (name) order, then line order: `writers` is in that order already.
    std::stable_sort(ws.begin(), ws.end(), [&](size_t a, size_t b) { return writers[a].steps > writers[b].steps; });
    std::vector<size_t> kept;
    for (size_t k : ws) {
      Writer& w = writers[k];
      const Writer* other = nullptr;
      for (size_t j : kept)
        if (writers[j].begin < w.end && w.begin < writers[j].end) {
          other = &writers[j];
          break;
        }
      if (other == nullptr) {
        kept.push_back(k);
        continue;
      }
      w.kept = false;
      dropped = true;
      const bool files = other->file != w.file, nodes = other->node != w.node;
      const std::string what = files && nodes ? "is in two files at the same time, on two nodes"
                               : files        ? "is in two files at the same time"
                               : nodes        ? "claims two nodes at the same time"
                                              : "is written by two processes at the same time";
      in->problems.push_back("rank " + std::to_string(rank) + " " + what + ": " + Describe(*in, *other) + " and " +
                             Describe(*in, w) + "; kept the first (" +
                             (other->steps > w.steps ? "more steps" : "as many steps, first by file name and line") +
                             "), the second's steps skipped");
    }
  }
  if (!dropped) return;
  size_t kept = 0;
  for (size_t i = 0; i < in->records.size(); ++i) {
    if (!writers[writer_of[i]].kept) continue;
    if (kept != i) {
      in->records[kept] = std::move(in->records[i]);
      in->origins[kept] = in->origins[i];
    }
    ++kept;
  }
  in->records.resize(kept);
  in->origins.resize(kept);
}

}  // namespace

bool ReadStepsFile(const std::string& path, const StepsFolderOptions& options, StepsInput* out) {
  uint64_t size = 0;
  std::string error;
  int fd = OpenRegularFile(path, FileRule{.what = "steps file"}, &size, &error);
  if (fd < 0) {
    out->problems.push_back(path + ": " + error + "; skipped");
    return false;
  }
  const size_t first = out->records.size();
  const uint32_t file = static_cast<uint32_t>(out->paths.size());
  out->paths.push_back(path);
  size_t line_no = 0, bad = 0, unresolved = 0;
  auto problem_at = [&](size_t line, const std::string& why) {
    ++out->bad_lines;
    if (bad++ < options.max_problems_per_file)
      out->problems.push_back(path + ":" + std::to_string(line) + ": " + why + "; line skipped");
  };
  auto problem = [&](const std::string& why) { problem_at(line_no, why); };
  slowdown::StepFileReader reader;
  auto take = [&](std::string_view line) {
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) return;
    slowdown::StepRecord r;
    std::string why;
    switch (reader.Take(line, &r, &why)) {
      case slowdown::StepFileReader::Line::kRecord:
        out->world = std::max(out->world, r.world);
        out->records.push_back(std::move(r));
        out->origins.push_back({file, line_no});
        return;
      case slowdown::StepFileReader::Line::kMeta: return;
      case slowdown::StepFileReader::Line::kBad: return problem(why);
      case slowdown::StepFileReader::Line::kUnresolved:
        // Once per file: every step line after a lost header or dictionary line says the same.
        ++out->bad_lines;
        if (unresolved++ == 0)
          out->problems.push_back(path + ":" + std::to_string(line_no) + ": " + why +
                                  "; this line and every other such line of the file skipped");
        return;
    }
  };
  std::string pending;
  bool too_long = false;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out->problems.push_back(path + ": read failed after line " + std::to_string(line_no) + ": " +
                              std::strerror(errno) + "; the rest of the file skipped");
      break;
    }
    if (n == 0) break;
    std::string_view chunk(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = chunk.find('\n')) != std::string_view::npos; chunk.remove_prefix(nl + 1)) {
      if (too_long) {
        ++line_no;
        problem("a line longer than 1 MiB");
        too_long = false;
      } else if (pending.empty()) {
        take(chunk.substr(0, nl));
      } else {
        pending.append(chunk.substr(0, nl));
        take(pending);
      }
      pending.clear();
    }
    if (!too_long) pending.append(chunk);
    if (pending.size() > kMaxLine) too_long = true, pending.clear();
  }
  close(fd);
  if (too_long) {
    ++line_no;
    problem("a line longer than 1 MiB");
  } else if (!pending.empty()) {
    take(pending);  // the last line, without its newline: a file cut short is read to its end
  }
  // A step years away from the rest of its rank's (a corrupt time) would stretch the job's time.
  const std::vector<char> lone = LoneSteps(out->records, first);
  size_t kept = first;
  for (size_t i = first; i < out->records.size(); ++i) {
    const slowdown::StepRecord& r = out->records[i];
    if (lone[i - first]) {
      problem_at(out->origins[i].line, "rank " + std::to_string(r.rank) + "'s step " + std::to_string(r.step) +
                                           " begins at " + Seconds(r.t_begin) +
                                           " (Unix seconds), more than a day from every other step of rank " +
                                           std::to_string(r.rank) + " in this file");
      continue;
    }
    if (kept != i) {
      out->records[kept] = std::move(out->records[i]);
      out->origins[kept] = out->origins[i];
    }
    ++kept;
  }
  out->records.resize(kept);
  out->origins.resize(kept);
  if (unresolved > 1)
    out->problems.push_back(path + ": " + std::to_string(unresolved) +
                            " lines skipped in all for a missing header or dictionary line");
  if (bad > options.max_problems_per_file)
    out->problems.push_back(path + ": " + std::to_string(bad - options.max_problems_per_file) +
                            " more bad lines not shown (" + std::to_string(bad) + " in all)");
  return true;
}

bool ReadStepsFolder(const std::string& dir, const StepsFolderOptions& options, StepsInput* out, std::string* error) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return *error = "cannot open folder " + dir + ": " + std::strerror(errno), false;
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (EndsWith(e->d_name, kSuffix)) names.emplace_back(e->d_name);
  closedir(d);
  if (names.empty())
    return *error = "no steps files (*" + std::string(kSuffix) + ") in " + dir +
                    " (the ranks write <rank>-<world>.steps.jsonl into XTIMER_TIMELINE_PATH)",
           false;
  std::sort(names.begin(), names.end());
  out->files = names.size();
  for (size_t i = 0; i < names.size(); ++i) {
    ReadStepsFile(dir + "/" + names[i], options, out);
    if (options.progress) options.progress(i + 1, names.size());
  }
  DropSecondWriters(out);
  std::set<int32_t> seen;
  for (const slowdown::StepRecord& r : out->records) seen.insert(r.rank);
  for (int32_t r = 0; r < out->world; ++r)
    if (!seen.contains(r)) out->ranks_missing.push_back(r);
  return true;
}

}  // namespace xtimer
