#include "preload/capture/dumper.h"

#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <unordered_map>

#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/identity.h"
#include "common/log.h"
#include "common/mutex.h"
#include "preload/capture/native_capture.h"
#include "preload/capture/proc_info.h"
#include "preload/capture/python_capture.h"
#include "preload/capture/signal_spec.h"
#include "preload/capture/thread_start_point.h"

extern char** environ;

namespace xtimer::capture {

void DumperAtForkChild();

struct Dumper::State {
  Mutex start_mu XT_ACQUIRED_BEFORE(mu);
  bool initialized = false;        // process-wide setup (signals, libunwind, Python lookup); survives fork
  bool started_by_signal = false;  // initialized by a thread the dump signal started
  bool atfork_registered = false;
  std::atomic<bool> sem_ready{false};
  std::atomic<bool> running{false};  // the dumper thread exists (or is being started) in this process
  std::atomic<DumpProvider*> provider{nullptr};
  std::atomic<void (*)(const DumpStats&)> observer{nullptr};
  DumperOptions options;
  // InstallAtLoad: the dump signal's handler may start the thread (not in a forked child).
  std::atomic<bool> handler_may_start{false};
  std::atomic<bool> handler_starting{false};  // one handler at a time decides
  std::string early_symbolizer;               // the options such a thread sets up with
  int retry_timer = -1;                       // kernel timer id (handler_starting guards it)
  int retry_ms = 10;
  std::string timeline_path;
  std::string symbolizer;  // resolved path, "" = none
  NativeCapture native;
  bool native_ok = false;
  std::string native_error;
  PythonCapture python;
  std::atomic<int> dump_signal{0};

  sem_t sem;
  std::atomic<uint32_t> pending{0};    // bit per Reason
  std::atomic<uint64_t> requested{0};  // tickets handed out

  Mutex mu;
  CondVar cv;
  uint64_t done_ticket XT_GUARDED_BY(mu) = 0;
  DumpStats stats XT_GUARDED_BY(mu);
  pid_t symbolizer_pid XT_GUARDED_BY(mu) = -1;
  std::string symbolize_next XT_GUARDED_BY(mu);  // a file written while the symboliser was busy: run it again after
};

namespace {

constinit std::atomic<Dumper::State*> g_state{nullptr};

uint32_t Bit(Reason r) { return 1u << static_cast<int>(r); }

double Ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

// Messages about the setup are worth saying once per process, not at every dump.
void LogOnce(std::atomic<bool>* flag, LogLevel level, const std::string& msg) {
  if (!flag->exchange(true)) Log(level, "%s", msg.c_str());
}

// The value our retry timer's signals carry (si_code SI_TIMER), so they do not count as requests.
constexpr int kRetryMarker = 0x78746472;

bool StartThread(Dumper::State* s, bool in_handler);
void InitOnDumperThread(Dumper::State* s);

// The handler cannot start the thread now: ask again in a moment with a one-shot kernel timer
// that sends the dump signal to the process (raw system calls: async-signal-safe).
void ArmRetry(Dumper::State* s) {
  if (s->retry_timer < 0) {
    sigevent ev;
    std::memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = s->dump_signal.load();
    ev.sigev_value.sival_int = kRetryMarker;
    int id = -1;
    if (syscall(SYS_timer_create, CLOCK_MONOTONIC, &ev, &id) != 0) return;
    s->retry_timer = id;
  }
  itimerspec when;
  std::memset(&when, 0, sizeof when);
  when.it_value.tv_sec = s->retry_ms / 1000;
  when.it_value.tv_nsec = (s->retry_ms % 1000) * 1000000L;
  syscall(SYS_timer_settime, s->retry_timer, 0, &when, nullptr);
  s->retry_ms = std::min(s->retry_ms * 2, 1000);
}

// In the handler, no dumper thread yet (InstallAtLoad, no Start so far).
void StartFromHandler(Dumper::State* s, void* ucontext) {
  if (s->handler_starting.exchange(true, std::memory_order_acquire)) return;  // another thread's handler decides
  if (!s->running.load()) {
    if (!ThreadStartPoint::Safe(ucontext)) {
      ArmRetry(s);
    } else if (!s->running.exchange(true)) {
      StartThread(s, true);
    }
  }
  s->handler_starting.store(false, std::memory_order_release);
}

void DumpSignalHandler(int, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  const bool retry = info != nullptr && info->si_code == SI_TIMER && info->si_value.sival_int == kRetryMarker;
  if (!retry) Dumper::Instance().RequestDump(Reason::kSignal);  // atomics + sem_post: async-signal-safe
  Dumper::State* s = g_state.load(std::memory_order_acquire);
  if (s != nullptr && !s->running.load() && s->handler_may_start.load()) StartFromHandler(s, ucontext);
  errno = saved_errno;
}

bool IsOurDumpHandler(const struct sigaction& sa) {
  return (sa.sa_flags & SA_SIGINFO) && sa.sa_sigaction == DumpSignalHandler;
}

// <dir of the object holding this code>/../bin/xtimer_symbolize, if it exists.
std::string FindSymbolizer() {
  Dl_info info;
  std::string self;
  if (dladdr(reinterpret_cast<void*>(&FindSymbolizer), &info) != 0 && info.dli_fname != nullptr &&
      std::strchr(info.dli_fname, '/') != nullptr) {
    self = info.dli_fname;
  } else {
    self = "/proc/self/exe";  // linked into the program itself (tests)
  }
  char real[PATH_MAX];
  if (realpath(self.c_str(), real) == nullptr) return {};
  std::string dir = real;
  dir.resize(dir.rfind('/'));
  std::string candidate = dir + "/../bin/xtimer_symbolize";
  return access(candidate.c_str(), X_OK) == 0 ? candidate : std::string();
}

// The environment without LD_PRELOAD: the symboliser needs no preloaded library.
std::vector<char*> SymbolizerEnv() {
  std::vector<char*> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) env.push_back(*e);
  env.push_back(nullptr);
  return env;
}

pid_t SpawnSymbolizer(const std::string& exe, const std::string& file) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t mask, def;
  sigemptyset(&mask);
  sigfillset(&def);
  sigdelset(&def, SIGKILL);
  sigdelset(&def, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &mask);    // the dumper thread blocks everything
  posix_spawnattr_setsigdefault(&attr, &def);  // and the program may ignore some
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> env = SymbolizerEnv();
  char* argv[] = {const_cast<char*>(exe.c_str()), const_cast<char*>(file.c_str()), nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), nullptr, &attr, argv, env.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    Log(LogLevel::kWarn, "cannot start %s: %s", exe.c_str(), std::strerror(rc));
    return -1;
  }
  return pid;
}

// True while the last symboliser started is still running (reaps it otherwise).
bool SymbolizerBusy(Dumper::State* s) XT_REQUIRES(s->mu) {
  if (s->symbolizer_pid <= 0) return false;
  int status = 0;
  pid_t r = waitpid(s->symbolizer_pid, &status, WNOHANG);
  if (r == 0) return true;
  if (r == s->symbolizer_pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    Log(LogLevel::kWarn, "xtimer_symbolize (pid %d) failed (status %d); the stack file stays unsymbolised",
        static_cast<int>(r), status);
  s->symbolizer_pid = -1;  // reaped, or reaped by the program (ECHILD)
  return false;
}

// One symboliser at a time: a dump that lands while one runs (it rewrites the same file) is
// symbolised once that one has finished. Called on the dumper thread only.
bool StartSymbolizer(Dumper::State* s, const std::string& path) {
  MutexLock lock(s->mu);  // guards the symbolizer too (Start may set it)
  if (s->symbolizer.empty() || path.empty()) return false;
  if (SymbolizerBusy(s)) {
    s->symbolize_next = path;
    return true;
  }
  s->symbolize_next.clear();
  s->symbolizer_pid = SpawnSymbolizer(s->symbolizer, path);
  return s->symbolizer_pid > 0;
}

void ReapSymbolizer(Dumper::State* s) {
  std::string next;
  {
    MutexLock lock(s->mu);
    if (SymbolizerBusy(s) || s->symbolize_next.empty()) return;
    next = s->symbolize_next;
  }
  StartSymbolizer(s, next);
}

DumpStats DoDump(Dumper::State* s, Reason reason) {
  DumpStats st;
  const uint64_t t0 = MonotonicNs();
  StackDump d;
  d.time = IsoUtc(WallNs());
  d.pid = getpid();
  d.reason = reason;
  d.host = HostName();
  d.process_state = ThreadState(0);

  // 1. Every thread, one at a time. States first: as found, before we interrupt anyone.
  std::vector<pid_t> tids = ListThreads();
  std::vector<char> states(tids.size());
  for (size_t i = 0; i < tids.size(); ++i) states[i] = ThreadState(tids[i]);
  std::vector<NativeStack> native;
  if (s->native_ok) {
    s->native.Capture(tids, s->options.thread_timeout_ms, &native, states);
  } else {
    native.resize(tids.size());
    for (size_t i = 0; i < tids.size(); ++i) {
      native[i].tid = tids[i];
      native[i].error = s->native_error;
    }
  }

  // 2. Python frames (no GIL needed).
  if (!s->python.available() && s->python.LibpythonAppeared()) s->python.Init();
  std::vector<PyThreadStack> py;
  std::string py_error;
  bool py_ok = s->python.Dump(&py, &py_error);
  d.python = py_ok ? s->python.status() : py_error;
  if (py_ok && !py_error.empty()) d.python += " (" + py_error + ")";
  if (py_ok) d.python_thread_names = s->python.names_status();
  const uint64_t t_captured = MonotonicNs();
  d.capture_ms = Ms(t_captured - t0);

  // 3. Everything else is interpretation of what was taken.
  ModuleMap modules;
  modules.Build();
  std::vector<int> module_remap(modules.modules().size(), -1);
  std::unordered_map<uint64_t, size_t> py_by_thread;
  for (size_t i = 0; i < py.size(); ++i) py_by_thread.emplace(py[i].thread_id, i);
  std::vector<bool> py_used(py.size(), false);

  int gil_holders = 0;
  d.threads.resize(tids.size());
  for (size_t i = 0; i < tids.size(); ++i) {
    ThreadDump& t = d.threads[i];
    NativeStack& ns = native[i];
    t.tid = tids[i];
    t.name = ThreadName(tids[i]);
    t.state = states[i];
    t.captured = ns.captured;
    t.error = ns.error;
    t.stop_us = ns.stop_us;
    t.pthread_id = ns.pthread_id;
    t.holds_gil = ns.holds_gil;
    t.native_truncated = ns.truncated;
    if (t.holds_gil == 1) ++gil_holders;
    if (ns.captured) ++st.captured;
    st.max_stop_us = std::max(st.max_stop_us, ns.stop_us);
    st.max_roundtrip_us = std::max(st.max_roundtrip_us, ns.roundtrip_us);
    t.native.reserve(ns.ips.size());
    for (auto it = ns.ips.rbegin(); it != ns.ips.rend(); ++it) {  // root first
      NativeFrame f;
      int m = -1;
      uint64_t vaddr = 0;
      if (modules.Find(*it, &m, &vaddr)) {
        if (module_remap[m] < 0) {
          module_remap[m] = static_cast<int>(d.modules.size());
          d.modules.push_back(modules.modules()[m]);
        }
        f.module = module_remap[m];
        f.offset = vaddr;
      } else {
        f.offset = *it;
      }
      t.native.push_back(f);
    }
    if (ns.pthread_id != 0) {
      auto it = py_by_thread.find(ns.pthread_id);
      if (it != py_by_thread.end()) {
        t.python = std::move(py[it->second].frames);
        t.python_truncated = py[it->second].truncated;
        t.python_name = std::move(py[it->second].name);
        py_used[it->second] = true;
        ++st.python_threads;
      }
    }
  }
  for (size_t i = 0; i < py.size(); ++i) {
    if (!py_used[i])
      d.python_unmatched.push_back({py[i].thread_id, std::move(py[i].frames), py[i].truncated, std::move(py[i].name)});
  }
  // holds_gil: only meaningful with Python, and only if at most one thread claims it (the check
  // answers 1 everywhere when CPython disabled it, e.g. with sub-interpreters).
  for (ThreadDump& t : d.threads) {
    if (!py_ok || gil_holders > 1) t.holds_gil = -1;
  }
  d.max_stop_us = st.max_stop_us;

  // 4. Who we are, what is in flight.
  DumpProvider* p = s->provider.load(std::memory_order_acquire);
  d.rank = p != nullptr ? p->GetRankInfo() : RankFromEnv();
  if (p != nullptr) {
    d.inflight = p->GetInflightOps();
    if (reason == Reason::kHang) d.trigger = p->Trigger();
  }

  // 5. The file.
  std::string dir = s->timeline_path;
  std::string path = dir + "/" + StackFileName(d.rank);
  std::string error;
  if (MakeDirs(dir, &error) && WriteStackFile(path, StackDumpToJson(d), &error)) {
    st.path = path;
  } else {
    st.error = error;
    Log(LogLevel::kError, "cannot write the stack file: %s", error.c_str());
  }
  st.threads = static_cast<int>(d.threads.size());
  st.capture_ms = d.capture_ms;
  st.total_ms = Ms(MonotonicNs() - t0);
  if (!st.path.empty()) {
    Log(LogLevel::kInfo, "stacks of %d threads (%d native, %d with Python frames) written to %s in %.1f ms", st.threads,
        st.captured, st.python_threads, path.c_str(), st.total_ms);
    // 6. Symbolise out of the process; the dump is complete whether or not this works.
    st.symbolizer_started = StartSymbolizer(s, path);
  }
  return st;
}

void* ThreadMain(void* arg) {
  auto* s = static_cast<Dumper::State*>(arg);
  pthread_setname_np(pthread_self(), "xtimer-dump");
  InitOnDumperThread(s);
  s->python.CheckGilSafetyOnThisThread();
  s->native.SetGilCheck(s->python.gil_check());
  for (;;) {
    timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += 200000000;  // wake now and then to reap (and maybe rerun) the symboliser
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1000000000;
    }
    sem_timedwait(&s->sem, &deadline);
    ReapSymbolizer(s);
    // Tickets first, then the reasons: every ticket <= covered has its reason bit set already.
    const uint64_t covered = s->requested.load(std::memory_order_seq_cst);
    const uint32_t reasons = s->pending.exchange(0, std::memory_order_seq_cst);
    if (reasons == 0) continue;
    Reason reason = (reasons & Bit(Reason::kHang))     ? Reason::kHang
                    : (reasons & Bit(Reason::kSignal)) ? Reason::kSignal
                                                       : Reason::kRequest;
    DumpStats st;
    try {
      st = DoDump(s, reason);
      if (auto* observer = s->observer.load(std::memory_order_acquire); observer != nullptr && !st.path.empty())
        observer(st);
    } catch (const std::exception& e) {
      st.error = e.what();
      Log(LogLevel::kError, "stack dump failed: %s", e.what());
    } catch (...) {
      st.error = "unknown error";
      Log(LogLevel::kError, "stack dump failed");
    }
    {
      MutexLock lock(s->mu);
      st.dumps = s->stats.dumps + 1;
      s->stats = st;
      s->done_ticket = std::max(s->done_ticket, covered);
    }
    s->cv.NotifyAll();
  }
  return nullptr;
}

// The caller has claimed s->running; it is given back if the thread cannot start. In a
// signal handler (`in_handler`) nothing is logged (not async-signal-safe).
bool StartThread(Dumper::State* s, bool in_handler) {
  // The dumper thread blocks every asynchronous signal: the program's signals go to its own
  // threads, and our capture signal never interrupts the thread that sends it.
  sigset_t all, old;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS}) sigdelset(&all, sig);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  int rc = pthread_create(&thread, &attr, ThreadMain, s);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    s->running.store(false);
    if (!in_handler) Log(LogLevel::kError, "cannot start the stack dumper thread: %s", std::strerror(rc));
    return false;
  }
  return true;
}

// The dump signal's handler, when the program has none for that signal. Cheap (no thread, no
// library loaded): also run at load by InstallAtLoad, where a signal the program inherited as
// ignored or handles already is said at debug level only (every process would say it).
void InstallDumpSignal(Dumper::State* s, bool at_load) {
  static std::atomic<bool> said_dump{false};
  std::string dspec = env::String("XTIMER_DUMP_SIGNAL");
  int sig = ParseSignalSpec(dspec);
  if (sig < 0 || sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS || sig == SIGILL ||
      sig == SIGFPE) {
    LogOnce(&said_dump, LogLevel::kWarn,
            "XTIMER_DUMP_SIGNAL=" + dspec + " cannot be used; using the default " + env::Default("XTIMER_DUMP_SIGNAL"));
    sig = ParseSignalSpec(env::Default("XTIMER_DUMP_SIGNAL"));
  }
  int capture_sig = ParseSignalSpec(env::String("XTIMER_CAPTURE_SIGNAL"));
  if (capture_sig < SIGRTMIN || capture_sig > SIGRTMAX)  // as InitProcessWide decides
    capture_sig = ParseSignalSpec(env::Default("XTIMER_CAPTURE_SIGNAL"));
  if (sig == capture_sig) {
    LogOnce(&said_dump, LogLevel::kWarn, "XTIMER_DUMP_SIGNAL equals XTIMER_CAPTURE_SIGNAL; dumps on signal are off");
    sig = 0;
  }
  if (sig <= 0) return;
  struct sigaction old;
  sigaction(sig, nullptr, &old);
  if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = DumpSignalHandler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, nullptr) == 0) s->dump_signal = sig;
  } else if (IsOurDumpHandler(old)) {
    s->dump_signal = sig;
  } else {
    s->dump_signal = 0;
    if (at_load) {
      Log(LogLevel::kDebug, "%s is ignored or handled by the program; no stack dumps on it", SignalName(sig).c_str());
      return;
    }
    LogOnce(&said_dump, LogLevel::kInfo,
            "the program handles " + SignalName(sig) +
                " itself; stack dumps on that signal are off "
                "(set XTIMER_DUMP_SIGNAL to another signal)");
  }
}

void InitProcessWide(Dumper::State* s) {
  static std::atomic<bool> said_capture{false}, said_symbolizer{false};
  s->timeline_path = s->options.timeline_path.empty() ? env::String("XTIMER_TIMELINE_PATH") : s->options.timeline_path;

  std::string spec = env::String("XTIMER_CAPTURE_SIGNAL");
  int capture_sig = ParseSignalSpec(spec);
  if (capture_sig < SIGRTMIN || capture_sig > SIGRTMAX) {
    Log(LogLevel::kWarn, "XTIMER_CAPTURE_SIGNAL=%s is not a real-time signal; using the default %s", spec.c_str(),
        env::Default("XTIMER_CAPTURE_SIGNAL"));
    capture_sig = ParseSignalSpec(env::Default("XTIMER_CAPTURE_SIGNAL"));
  }
  std::string error;
  s->native_ok = s->native.Init(capture_sig, &error);
  if (!s->native_ok) {
    s->native_error = "native capture unavailable: " + error;
    LogOnce(&said_capture, LogLevel::kWarn, s->native_error);
  } else if (!s->native.unwinder_available()) {
    LogOnce(&said_capture, LogLevel::kWarn, "native frames unavailable: " + s->native.unwinder_error());
  }

  s->python.Init();

  if (s->options.install_dump_signal) InstallDumpSignal(s, false);

  MutexLock lock(s->mu);
  if (s->options.symbolizer == "none") {
    s->symbolizer.clear();
  } else if (!s->options.symbolizer.empty()) {
    s->symbolizer = s->options.symbolizer;
  } else {
    s->symbolizer = FindSymbolizer();
    if (s->symbolizer.empty())
      LogOnce(&said_symbolizer, LogLevel::kInfo,
              "xtimer_symbolize not found next to the library (../bin/); stack files stay unsymbolised");
  }
}

// Once per process, under start_mu: the setup and the fork handler.
void InitLocked(Dumper::State* s, const DumperOptions& options) {
  s->options = options;
  InitProcessWide(s);
  s->initialized = true;
  if (!s->atfork_registered) {
    pthread_atfork(nullptr, nullptr, DumperAtForkChild);
    s->atfork_registered = true;
  }
}

// A thread the dump signal's handler started sets the capture up itself (loading libunwind and
// looking for Python cannot happen in a handler), then drops the retry timer.
void InitOnDumperThread(Dumper::State* s) {
  MutexLock lock(s->start_mu);
  if (!s->initialized) {
    DumperOptions options;
    options.symbolizer = s->early_symbolizer;
    InitLocked(s, options);
    s->started_by_signal = true;
  }
  if (s->retry_timer >= 0 && !s->handler_starting.exchange(true)) {
    syscall(SYS_timer_delete, s->retry_timer);
    s->retry_timer = -1;
    s->handler_starting.store(false);
  }
}

// Creates the state once (never freed: handlers and the thread may use it until exit).
Dumper::State* GetOrCreateState() {
  Dumper::State* s = g_state.load(std::memory_order_acquire);
  if (s != nullptr) return s;
  static Mutex create_mu;
  MutexLock lock(create_mu);
  s = g_state.load();
  if (s == nullptr) {
    s = new Dumper::State();
    sem_init(&s->sem, 0, 0);
    s->sem_ready.store(true);
    g_state.store(s, std::memory_order_release);
  }
  return s;
}

}  // namespace

void DumperAtForkChild() {
  // Only this thread exists in the child: no dumper thread, no requests of the parent's.
  Dumper::State* s = g_state.load();
  if (s == nullptr) return;
  new (&s->start_mu) Mutex();
  new (&s->mu) Mutex();
  new (&s->cv) CondVar();
  s->running.store(false);
  sem_init(&s->sem, 0, 0);
  s->pending.store(0);
  {
    MutexLock lock(s->mu);  // the fresh mutex: no other thread exists to hold it
    s->done_ticket = s->requested.load();
    s->symbolizer_pid = -1;
    s->symbolize_next.clear();
    s->stats = DumpStats();
  }
  s->native.ResetAfterFork();
  s->python.ResetAfterFork();
  // The signal still reaches the inherited handler, which must not start a thread here: this
  // child's file would replace its parent's. Timers are not inherited.
  s->handler_may_start.store(false);
  s->handler_starting.store(false);
  s->retry_timer = -1;
}

Dumper& Dumper::Instance() {
  static constinit Dumper instance;
  return instance;
}

int Dumper::InstallAtLoad(bool take_dumps, const std::string& symbolizer) {
  try {
    State* s = GetOrCreateState();
    MutexLock lock(s->start_mu);
    if (s->initialized || s->running.load()) return s->dump_signal.load();  // Start() came first
    ThreadStartPoint::Init();
    s->early_symbolizer = symbolizer;
    InstallDumpSignal(s, true);
    if (!s->atfork_registered) {
      pthread_atfork(nullptr, nullptr, DumperAtForkChild);
      s->atfork_registered = true;
    }
    s->handler_may_start.store(take_dumps && s->dump_signal > 0);
    return s->dump_signal.load();
  } catch (...) {
    return 0;
  }
}

void Dumper::SetDumpObserver(void (*observer)(const DumpStats& stats)) {
  if (State* s = GetOrCreateState()) s->observer.store(observer, std::memory_order_release);
}

bool Dumper::Start(DumpProvider* provider, const DumperOptions& options) {
  try {
    State* s = GetOrCreateState();
    MutexLock lock(s->start_mu);
    if (provider != nullptr) s->provider.store(provider, std::memory_order_release);
    if (!s->initialized) {
      InitLocked(s, options);
    } else if (s->started_by_signal && !options.symbolizer.empty()) {
      // The signal's handler started the thread with the load-time choice; the caller knows better.
      s->started_by_signal = false;
      MutexLock sym_lock(s->mu);
      s->symbolizer = options.symbolizer == "none" ? std::string() : options.symbolizer;
    }
    if (s->running.exchange(true)) return true;
    return StartThread(s, false);
  } catch (...) {
    Log(LogLevel::kError, "cannot start the stack dumper");
    return false;
  }
}

uint64_t Dumper::RequestDump(Reason reason) {
  State* s = g_state.load(std::memory_order_acquire);
  if (s == nullptr || !s->sem_ready.load(std::memory_order_acquire)) return 0;
  s->pending.fetch_or(Bit(reason), std::memory_order_seq_cst);
  uint64_t ticket = s->requested.fetch_add(1, std::memory_order_seq_cst) + 1;
  sem_post(&s->sem);
  return ticket;
}

bool Dumper::WaitForDump(uint64_t ticket, double timeout_s) {
  State* s = g_state.load(std::memory_order_acquire);
  if (s == nullptr || ticket == 0) return false;
  MutexLock lock(s->mu);
  return s->cv.WaitFor(s->mu, std::chrono::duration<double>(timeout_s),
                       [&]() XT_REQUIRES(s->mu) { return s->done_ticket >= ticket; });
}

bool Dumper::DumpAndWait(Reason reason, double timeout_s, DumpStats* stats) {
  State* s = g_state.load(std::memory_order_acquire);
  if (s == nullptr || !s->running.load()) {
    if (!Start(s != nullptr ? s->provider.load() : nullptr, s != nullptr ? s->options : DumperOptions())) return false;
  }
  bool ok = WaitForDump(RequestDump(reason), timeout_s);
  if (ok && stats != nullptr) *stats = LastStats();
  return ok;
}

DumpStats Dumper::LastStats() {
  State* s = g_state.load(std::memory_order_acquire);
  if (s == nullptr) return {};
  MutexLock lock(s->mu);
  return s->stats;
}

int Dumper::dump_signal() const {
  State* s = g_state.load(std::memory_order_acquire);
  return s != nullptr ? s->dump_signal.load() : 0;
}

int Dumper::capture_signal() const {
  State* s = g_state.load(std::memory_order_acquire);
  return s != nullptr && s->native_ok ? s->native.signal() : 0;
}

}  // namespace xtimer::capture
