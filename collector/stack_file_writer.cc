#include "collector/stack_file_writer.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/log.h"

namespace xtimer::collector {
namespace {

constexpr size_t kMaxQueueBytes = size_t{128} << 20;  // stack files waiting for the thread

}  // namespace

StackFileWriter::~StackFileWriter() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  queued_cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void StackFileWriter::Write(std::string path, const std::string& bytes, const std::shared_ptr<Group>& group) {
  {
    MutexLock lock(mu_);
    if (queue_bytes_ + bytes.size() <= kMaxQueueBytes) {
      if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
      ++group->pending;
      queue_bytes_ += bytes.size();
      queue_.push_back(Job{std::move(path), bytes, group});
      queued_cv_.NotifyOne();
      return;
    }
  }
  WriteNewFile(path, bytes);
}

void StackFileWriter::Loop() {
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);  // bulk work: after calls and merges
  MutexLock lock(mu_);
  for (;;) {
    queued_cv_.Wait(mu_, [&]() XT_REQUIRES(mu_) { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything is written
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    WriteNewFile(job.path, job.bytes);
    lock.Lock();
    queue_bytes_ -= job.bytes.size();
    --job.group->pending;
    written_cv_.NotifyAll();
  }
}

int StackFileWriter::WaitFor(const Group& group, double timeout_s) {
  MutexLock lock(mu_);
  written_cv_.WaitFor(mu_, std::chrono::duration<double>(timeout_s),
                      [&]() XT_REQUIRES(mu_) { return group.pending == 0; });
  return group.pending;
}

void WriteNewFile(const std::string& path, const std::string& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < bytes.size();) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += n;
  }
  int saved = errno;
  if (fd >= 0) close(fd);
  if (!ok) {
    Log(LogLevel::kError, "collector: cannot write %s: %s (the merge still has it)", path.c_str(), strerror(saved));
    if (fd >= 0) unlink(path.c_str());
  }
}

}  // namespace xtimer::collector
