#include "ckpt/checkpointer.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "common/env.h"
#include "common/log.h"

namespace xtimer::ckpt {

Status RankCheckpointer::Create(const CheckpointerOptions& options, std::unique_ptr<RankCheckpointer>* out) {
  std::unique_ptr<RankCheckpointer> c(new RankCheckpointer);
  c->opt_ = options;
  if (c->opt_.shm_dir.empty()) c->opt_.shm_dir = env::String("XTIMER_CKPT_SHM_DIR");
  if (c->opt_.keep < 0) c->opt_.keep = static_cast<int>(env::Int("XTIMER_CKPT_KEEP"));
  if (c->opt_.persist_on_failure < 0) c->opt_.persist_on_failure = env::Bool("XTIMER_CKPT_PERSIST_ON_FAILURE") ? 1 : 0;
  if (c->opt_.ckpt_dir.empty() || c->opt_.ckpt_dir[0] != '/')
    return Status::Error("the checkpoint folder must be an absolute path: '" + c->opt_.ckpt_dir + "'");
  Status st = Segment::Create(c->opt_.shm_dir, c->opt_.ckpt_dir, c->opt_.rank, &c->seg_);
  if (st.code() == Status::Code::kUntrusted) {
    // Another user's file (or a link) holds the segment's name: no memory snapshot is read from
    // it (a load reads the disk and names it once) and saves report it (see segment_error_).
    c->segment_error_ = st;
  } else if (!st.ok()) {
    return st;
  }
  *out = std::move(c);
  return Status::Ok();
}

RankCheckpointer::~RankCheckpointer() = default;

std::string RankCheckpointer::ctl_path() const {
  return seg_ ? seg_->ctl_path() : opt_.shm_dir + "/" + Segment::BaseName(opt_.ckpt_dir, opt_.rank) + ".ctl";
}

Status RankCheckpointer::Prepare() {
  if (!seg_) {
    // The name was taken by a file that is not ours: it may have been removed since.
    Status st = Segment::Create(opt_.shm_dir, opt_.ckpt_dir, opt_.rank, &seg_);
    if (!st.ok()) {
      segment_error_ = st;
      return Status(st.code() == Status::Code::kUntrusted
                        ? Status::Untrusted("cannot save rank " + std::to_string(opt_.rank) +
                                            " to shared memory: " + st.message())
                        : st);
    }
    segment_error_ = Status::Ok();
    claimed_ = false;
  }
  if (seg_->Unlinked()) {
    // The saver removed the segment (it had nothing worth keeping) while we were not its owner
    // yet: start a new one rather than write into files nobody can see.
    XT_RETURN_IF_ERROR(Segment::Create(opt_.shm_dir, opt_.ckpt_dir, opt_.rank, &seg_));
    claimed_ = false;
  }
  if (!claimed_) {
    XT_RETURN_IF_ERROR(seg_->Claim(static_cast<uint32_t>(std::max(0, opt_.keep)), opt_.persist_on_failure != 0));
    claimed_ = true;
  }
  if (!inline_ && opt_.saver_binary.empty()) {
    inline_ = true;  // asked for: disk saves are written by the caller
  }
  if (!inline_) {
    // The segment is claimed first, then the saver checked: a saver that is about to exit for
    // being idle looks again after releasing its lock and sees us.
    Status st = EnsureSaver(opt_.saver_binary, opt_.shm_dir, opt_.saver_idle_exit_s);
    if (!st.ok()) {
      Log(LogLevel::kWarn, "%s", st.message().c_str());
      inline_ = true;
    }
  }
  return Status::Ok();
}

Status RankCheckpointer::CheckFailures() {
  Control* c = seg_->ctl();
  int64_t failed = A(c->failed_step).load();
  if (failed >= 0 && failed != reported_failure_) {
    reported_failure_ = failed;
    std::string msg(c->error, strnlen(c->error, sizeof c->error));
    return Status::Error(msg.empty() ? "step " + std::to_string(failed) + " was not written to disk" : msg);
  }
  return Status::Ok();
}

Status RankCheckpointer::PersistPendingInline() {
  Control* c = seg_->ctl();
  int order[2] = {0, 1};
  if (A(c->slot[1].step).load() < A(c->slot[0].step).load()) std::swap(order[0], order[1]);
  for (int slot : order) {
    if (A(c->slot[slot].disk).load() != kDiskWanted) continue;
    int64_t step = -1;
    XT_RETURN_IF_ERROR(PersistSlot(*seg_, slot, nullptr, &step));
  }
  return Status::Ok();
}

Status RankCheckpointer::Save(SaveArgs args, bool* saved, std::string* why) {
  *saved = false;
  XT_RETURN_IF_ERROR(Prepare());
  if (Status f = CheckFailures(); !f.ok()) Log(LogLevel::kError, "%s", f.message().c_str());
  if (args.threads == 0) args.threads = opt_.threads;
  args.wait_if_busy = args.disk;
  args.while_waiting = [this](const std::string& reason) -> Status {
    if (inline_) return PersistPendingInline();
    Status st = EnsureSaver(opt_.saver_binary, opt_.shm_dir, opt_.saver_idle_exit_s);
    if (!st.ok()) {
      inline_ = true;
      return PersistPendingInline();
    }
    return Status::Ok();
  };
  SaveResult result;
  XT_RETURN_IF_ERROR(seg_->Save(args, &result, why));
  *saved = result == SaveResult::kSaved;
  if (*saved && args.disk) {
    if (inline_) XT_RETURN_IF_ERROR(PersistPendingInline());
    else WakeSaver(opt_.shm_dir);
  }
  return Status::Ok();
}

Status RankCheckpointer::LeaseMemory(ReadLease* lease) {
  if (!seg_) return segment_error_;
  return seg_->AcquireCurrent(Holder::kLoad, lease);
}

int64_t RankCheckpointer::PersistedStep() const { return seg_ ? A(seg_->ctl()->persisted).load() : -1; }

bool RankCheckpointer::DiskPending() const {
  if (!seg_) return false;
  for (auto& s : seg_->ctl()->slot)
    if (A(s.disk).load() == kDiskWanted) return true;
  return false;
}

Status RankCheckpointer::Wait(double timeout_s, const ProgressFn& progress) {
  if (!seg_) return Status::Ok();  // nothing was saved
  Control* c = seg_->ctl();
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    bool pending = false;
    for (auto& s : c->slot) pending |= A(s.disk).load() == kDiskWanted;
    if (!pending) break;
    if (inline_) {
      XT_RETURN_IF_ERROR(PersistPendingInline());
      continue;
    }
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s >= 0 && waited > timeout_s)
      return Status::Busy("disk writes of rank " + std::to_string(seg_->rank()) + " still pending after " +
                          std::to_string(timeout_s) + " s");
    // The saver may have gone (killed, or idle before we claimed): start it again.
    Status st = EnsureSaver(opt_.saver_binary, opt_.shm_dir, opt_.saver_idle_exit_s);
    if (!st.ok()) inline_ = true;
    if (progress && A(c->progress_step).load() >= 0) progress(A(c->progress_done).load(), A(c->progress_total).load());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& s : c->slot)
    if (A(s.disk).load() == kDiskFailed) {
      reported_failure_ = A(c->failed_step).load();
      std::string msg(c->error, strnlen(c->error, sizeof c->error));
      return Status::Error(msg.empty() ? "a disk save failed" : msg);
    }
  return CheckFailures();
}

void RankCheckpointer::Close() {
  if (claimed_ && seg_) seg_->CloseClean();
}

}  // namespace xtimer::ckpt
