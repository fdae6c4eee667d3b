#include "viewer/steps_folder.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "common/regular_file.h"
#include "common/slowdown/step_json.h"

namespace xtimer {
namespace {

constexpr size_t kMaxLine = 1 << 20;
constexpr const char* kSuffix = ".steps.jsonl";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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
  size_t line_no = 0, bad = 0, unresolved = 0;
  auto problem = [&](const std::string& why) {
    ++out->bad_lines;
    if (bad++ < options.max_problems_per_file)
      out->problems.push_back(path + ":" + std::to_string(line_no) + ": " + why + "; line skipped");
  };
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
  std::set<int32_t> seen;
  for (const slowdown::StepRecord& r : out->records) seen.insert(r.rank);
  for (int32_t r = 0; r < out->world; ++r)
    if (!seen.contains(r)) out->ranks_missing.push_back(r);
  return true;
}

}  // namespace xtimer
