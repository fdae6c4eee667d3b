// One dump round (collector/README.md, "Dump rounds"): the stacks every rank uploads for one
// dump_id, merged as they come (StackMerger), until the core closes the round and hands the
// merger to MergeRound (round_merge.h).
//
// Guarantees: a rank's first stacks win (later ones are Duplicate); once Close() has run,
// nothing more is added or skipped; `complete` turns true when every rank 0..world-1 is in.
//
// Threads and locks: three kinds of fields, each with its own owner.
//   - Identity (dump_id, name, dir, dir_ok, started_s, deadline_s, writes): set by the core
//     while it creates the round, before the round is shared, then read-only (no lock).
//   - Stacks (world, merger, have, skipped, closed): guarded by `mu_`, taken only inside the
//     methods below, which any thread may call (uploads of many ranks are added in parallel).
//   - The core's bookkeeping (info, files, pacing): guarded by the core's mutex (a rule in words:
//     the analysis cannot name the core's mutex from here).
// Lock order: the core's mutex, then a round's mu_; never the other way round (in words too:
// the two mutexes belong to different objects). The stacks' fields are checked by the compiler
// (XT_GUARDED_BY, common/thread_annotations.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_set>

#include "collector/collector_core.h"
#include "collector/stack_file_writer.h"
#include "collector/upload_pacing.h"
#include "common/mutex.h"
#include "common/stacks/stack_file.h"
#include "viewer/stack_merger.h"

namespace xtimer::collector {

class DumpRound {
 public:
  // `world`: the job's world size now (0: taken from the first stack file).
  DumpRound(int32_t world, size_t upload_window, double upload_idle_s);

  // ---- identity: set before the round is shared, then read-only ----
  std::string dump_id, name, dir;
  double started_s = 0, deadline_s = 0;
  bool dir_ok = false;  // dir was created: stack files and merge outputs go there
  const std::shared_ptr<StackFileWriter::Group> writes = std::make_shared<StackFileWriter::Group>();

  std::atomic<bool> complete{false};     // every rank of the world has stacks
  std::atomic<bool> needs_import{true};  // the next Tick brings in the pending own dumps

  // ---- the core's bookkeeping: under the core's mutex ----
  RoundInfo info;
  std::set<std::string> files;  // merge outputs written: what RoundFile may serve
  UploadPacing pacing;

  // ---- stacks: each method takes mu_ ----
  enum class AddResult { kAdded, kClosed, kDuplicate, kWorldMismatch, kMergeFailed };
  // Adds one rank's parsed stack file. kAdded: *path is where its copy goes (empty when the
  // round has no folder). kWorldMismatch and kMergeFailed: *error says why (the former is also
  // recorded in the merge's skipped list).
  AddResult Add(const StackFile& file, const std::string& source, std::string* path, std::string* error)
      XT_EXCLUDES(mu_);
  // Records an unusable upload in the merge's skipped list (at most 1,000 per round; none once
  // closed).
  void Skip(const std::string& source, const std::string& reason) XT_EXCLUDES(mu_);
  bool Has(int32_t rank) const XT_EXCLUDES(mu_);
  size_t Received() const XT_EXCLUDES(mu_);  // ranks with stacks
  // Every rank of `ranks` has stacks (false for an empty set).
  bool HasAll(const std::set<int32_t>& ranks) const XT_EXCLUDES(mu_);

  // Closes the round: later Adds answer kClosed. Returns what the merge needs.
  struct Closed {
    std::unique_ptr<StackMerger> merger;
    int32_t world = 0;
    bool complete = false;
  };
  Closed Close() XT_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  bool closed_ XT_GUARDED_BY(mu_) = false;
  int32_t world_ XT_GUARDED_BY(mu_) = 0;
  std::unique_ptr<StackMerger> merger_ XT_GUARDED_BY(mu_);
  std::unordered_set<int32_t> have_ XT_GUARDED_BY(mu_);
  size_t skipped_ XT_GUARDED_BY(mu_) = 0;
};

// Creates the round's folder out_dir/<UTC of hang_ms> ("20261122T101530Z", then "-2", "-3"... when
// the name is taken on disk or in `used_names`) and sets round->name, dir and dir_ok. With no
// out_dir, only the name. A folder that cannot be created is logged; the round is then merged
// but not written.
void CreateRoundFolder(const std::string& out_dir, int64_t hang_ms, const std::set<std::string>& used_names,
                       DumpRound* round);

}  // namespace xtimer::collector
