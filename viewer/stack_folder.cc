#include "viewer/stack_folder.h"

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/stacks/stack_file_threads.h"

namespace xtimer {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "00002-00004.stacktrace" -> 4; 0 when the name does not follow the pattern.
int32_t WorldFromName(std::string_view name) {
  name.remove_suffix(std::string_view(".stacktrace").size());
  size_t dash = name.find('-');
  if (dash == std::string_view::npos || dash == 0) return 0;
  int32_t rank = 0, world = 0;
  auto [p1, e1] = std::from_chars(name.data(), name.data() + dash, rank);
  auto [p2, e2] = std::from_chars(name.data() + dash + 1, name.data() + name.size(), world);
  if (e1 != std::errc() || e2 != std::errc() || p1 != name.data() + dash || p2 != name.data() + name.size()) return 0;
  return world > 0 ? world : 0;
}

}  // namespace

bool MergeStackFolder(const std::string& dir, const MergeOptions& merge, const FolderOptions& options,
                      MergedStacks* out, std::string* error) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return *error = "cannot open folder " + dir + ": " + std::strerror(errno), false;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    if (EndsWith(name, ".stacktrace") && name.size() > std::string_view(".stacktrace").size()) names.emplace_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());

  MergeOptions opts = merge;
  if (opts.world_size <= 0) {
    std::map<int32_t, size_t> votes;
    for (const std::string& n : names)
      if (int32_t w = WorldFromName(n)) votes[w]++;
    size_t best = 0;
    for (auto& [w, count] : votes)
      if (count > best) best = count, opts.world_size = w;
  }
  // Without a world size from the names the first file decides it, which only one reader can do.
  int threads = options.threads > 0 ? options.threads
                                    : static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  if (opts.world_size <= 0 || names.size() < 64) threads = 1;
  threads = std::max(1, std::min<int>(threads, static_cast<int>(names.size())));

  std::atomic<size_t> next{0}, done{0};
  std::mutex claim_mu, progress_mu;
  std::map<int32_t, size_t> claimed;  // rank -> index of the file it was read from
  std::vector<StackMerger> mergers;
  for (int t = 0; t < threads; ++t) mergers.emplace_back(opts);

  auto work = [&](StackMerger& merger) {
    // A large file is read thread by thread into the merge, never held whole (stack_file_threads.h).
    StackFileThreads file;
    std::string why;
    for (size_t i = next++; i < names.size(); i = next++) {
      const std::string& name = names[i];
      if (!file.Open(dir + "/" + name, &why)) {
        merger.Skip(name, why);
      } else {
        const StackFile& header = file.header();
        // One file per rank across all readers; which of two duplicates wins depends on timing
        // when reading in parallel, the other is reported.
        bool duplicate = false;
        if (header.world_size == opts.world_size) {  // others are refused by BeginRank, claiming nothing
          std::lock_guard<std::mutex> lock(claim_mu);
          auto [it, fresh] = claimed.try_emplace(header.rank, i);
          if (!fresh) {
            duplicate = true;
            why = "rank " + std::to_string(header.rank) + " was already read from " + names[it->second];
          }
        }
        if (duplicate) {
          merger.Skip(name, why);
        } else if (merger.BeginRank(header, name, &why)) {
          bool read_all = file.ForEach([&](const StackThread& t, size_t index) { merger.AddThread(t, index); }, &why);
          merger.EndRank();
          // Rewritten in place between the two reads: what was merged stays, and the file is named.
          if (!read_all) merger.Skip(name, why);
        }
      }
      // Large files leave large buffers behind: give them back before the merge grows.
      file.Close();
      size_t n = ++done;
      if (options.progress && (n % 64 == 0 || n == names.size())) {
        std::lock_guard<std::mutex> lock(progress_mu);
        options.progress(n, names.size());
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, std::ref(mergers[t]));
  work(mergers[0]);
  for (std::thread& t : pool) t.join();
  for (int t = 1; t < threads; ++t) mergers[0].Absorb(std::move(mergers[t]));
  *out = std::move(mergers[0]).Finish();
  if (out->world_size == 0) out->world_size = std::max(0, opts.world_size);
  // Skipped files in name order, whichever thread met them.
  std::stable_sort(out->skipped.begin(), out->skipped.end(),
                   [](const SkippedInput& a, const SkippedInput& b) { return a.source < b.source; });
  return true;
}

}  // namespace xtimer
