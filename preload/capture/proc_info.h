// Readers for /proc/self and the loaded-object list. Run on the dumper thread, never in a
// signal handler (they open files and allocate).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "preload/capture/stack_dump.h"

namespace xtimer::capture {

// Thread ids of the process, from /proc/self/task.
std::vector<pid_t> ListThreads();
// /proc/self/task/<tid>/comm without the newline; "" if the thread is gone.
std::string ThreadName(pid_t tid);
// Field 3 of /proc/self/task/<tid>/stat ('?' if the thread is gone); tid 0 reads /proc/self/stat.
char ThreadState(pid_t tid);
// Whether `sig` is in the thread's blocked mask (SigBlk in /proc/self/task/<tid>/status).
bool SignalBlockedIn(pid_t tid, int sig);

// Every loaded ELF object (dl_iterate_phdr), to turn an instruction address into
// module path + ELF virtual address, as addr2line and libdwfl expect it.
class ModuleMap {
 public:
  void Build();
  // True if a loaded segment holds `address`: *module indexes modules(), *vaddr is address - load bias.
  bool Find(uint64_t address, int* module, uint64_t* vaddr) const;
  const std::vector<ModuleInfo>& modules() const { return modules_; }

 private:
  struct Segment {
    uint64_t start, end, bias;
    int module;
  };
  std::vector<Segment> segments_;  // sorted by start
  std::vector<ModuleInfo> modules_;
};

}  // namespace xtimer::capture
