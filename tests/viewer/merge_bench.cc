// Benchmark of the viewer's merge: generates RANKS x THREADS x FRAMES stack files (realistic
// symbolised frames, a few ranks out of step), then reads and merges them in a child process and
// prints its wall time and peak RSS (getrusage), apart from the generation.
//
//   viewer_merge_bench [--ranks 4096] [--threads 64] [--frames 48] [--dir DIR] [--keep]
//   viewer_merge_bench --parse-whole FILE   (reads FILE whole with ReadStackFile and exits: the
//                                            baseline of tests/viewer/large_file_bench.py)
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/stacks/stack_reader.h"
#include "tests/viewer/reference_stack_reader.h"
#include "viewer/merge_output.h"
#include "viewer/stack_folder.h"
#include "viewer/verdict.h"

namespace {

std::string Hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// One native frame as the symbolising agent writes it.
std::string NativeJson(int kind, int depth) {
  static const char* kModules[] = {"/usr/lib/x86_64-linux-gnu/libc.so.6",
                                   "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
                                   "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
                                   "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/bin/python3.11"};
  static const char* kFunctions[] = {
      "c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal(std::chrono::duration<long, std::ratio<1l, 1000l> >)",
      "at::native::(anonymous namespace)::structured_add_out::impl(at::Tensor const&, at::Tensor const&)",
      "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
      "ncclProxyProgress(void*)",
      "_PyEval_EvalFrameDefault",
      "__futex_abstimed_wait_common",
      "std::condition_variable::wait(std::unique_lock<std::mutex>&)",
      "c10::ThreadPool::main_loop(unsigned long)"};
  static const char* kFiles[] = {"torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
                                 "aten/src/ATen/native/BinaryOps.cpp",
                                 "torch/csrc/autograd/engine.cpp",
                                 "src/proxy.cc",
                                 "Python/ceval.c",
                                 "./nptl/futex-internal.c",
                                 "libstdc++-v3/src/c++11/condition_variable.cc",
                                 "c10/core/thread_pool.cpp"};
  int m = (kind + depth) % 5, f = (kind * 3 + depth) % 8;
  return std::string("{\"module\":\"") + kModules[m] + "\",\"offset\":\"" + Hex(0x10000 + kind * 4096 + depth * 64) +
         "\",\"function\":\"" + kFunctions[f] + "#" + std::to_string(depth) + "\",\"file\":\"" + kFiles[f] +
         "\",\"line\":" + std::to_string(100 + depth * 7 + kind) + ",\"inlined\":false}";
}

std::string PythonJson(const char* function, const char* file, int line) {
  return std::string("{\"function\":\"") + function + "\",\"file\":\"" + file + "\",\"line\":" + std::to_string(line) +
         "}";
}

// A thread's JSON after its tid; kind picks one of 12 kinds of threads (pools, NCCL, autograd...).
std::string ThreadBody(int kind, bool main, int frames, int variant) {
  std::string s = ",\"name\":\"pt_thread_" + std::to_string(kind) + "\",\"main\":" + (main ? "true" : "false") +
                  ",\"holds_gil\":" + (main ? "false" : "null") + ",\"state\":\"S\",\"native\":[";
  for (int d = 0; d < frames; ++d) {
    if (d) s += ',';
    s += NativeJson(kind + (d == frames - 1 ? variant * 13 : 0), d);
  }
  s += "],\"python\":[";
  if (main) {
    s += PythonJson("<module>", "/job/train.py", 300);
    for (int d = 0; d < 16; ++d)
      s += "," + PythonJson("forward", "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1500 + d);
    s += variant == 1
             ? "," + PythonJson("load_batch", "/job/train.py", 88)
             : "," + PythonJson("all_reduce",
                                "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 2050);
  }
  return s + "]}";
}

std::string RankFile(int rank, int world, int threads, int frames, const std::vector<std::string>& bodies,
                     const std::string& main_ok, const std::string& main_odd) {
  int variant = rank == world / 3 ? 1 : 0;                            // one rank is in load_batch
  int64_t seq = (rank == 17 || rank == world / 2 + 1) ? 1233 : 1234;  // two ranks behind
  std::string s = "{\"format\":\"xtimer-stacktrace\",\"version\":1,\"rank\":" + std::to_string(rank) +
                  ",\"world_size\":" + std::to_string(world) + ",\"local_rank\":" + std::to_string(rank % 8) +
                  ",\"host\":\"node-" + std::to_string(rank / 8) + "\",\"pid\":" + std::to_string(1000 + rank) +
                  ",\"reason\":\"hang\",\"time\":\"2026-11-22T10:15:30.123Z\",\"symbolized\":true,"
                  "\"process_state\":{\"code\":\"S\",\"name\":\"sleeping\"},\"inflight_ops\":[";
  if (variant == 0)
    s += "{\"name\":\"ncclAllReduce\",\"kind\":\"collective\",\"stream\":\"0x5581a0c0\",\"comm\":\"3a9f0c12\","
         "\"comm_rank\":" +
         std::to_string(rank) + ",\"comm_size\":" + std::to_string(world) + ",\"seq\":" + std::to_string(seq) +
         ",\"peer\":-1,\"bytes\":67108864,\"state\":\"running\",\"in_flight_s\":302.1}";
  s += "],\"threads\":[";
  for (int t = 0; t < threads; ++t) {
    if (t) s += ',';
    s += "{\"tid\":" + std::to_string(1000 + rank * 100 + t);
    s += t == 0 ? (variant ? main_odd : main_ok) : bodies[t % bodies.size()];
  }
  return s + "]}\n";
}

double Seconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  int ranks = 4096, threads = 64, frames = 48, jobs = 0;
  std::string dir;
  bool keep = false, merge_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--ranks") ranks = std::stoi(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--frames") frames = std::stoi(next());
    else if (a == "--dir") dir = next();
    else if (a == "--jobs") jobs = std::stoi(next());
    else if (a == "--keep") keep = true;
    else if (a == "--merge-only") merge_only = true;  // the child
    else if (a == "--parse-whole") {
      // The reader as it was before large files were read thread by thread: the whole file and
      // its parse in memory at once.
      xtimer::StackFile file;
      xtimer::StackReadBuffer buffer;
      std::string error, path = next();
      if (!xtimer::ReadStackFile(path, &file, &buffer, &error))
        return std::fprintf(stderr, "%s: %s\n", path.c_str(), error.c_str()), 2;
      std::printf("%zu threads\n", file.threads.size());
      return 0;
    } else return std::fprintf(stderr, "unknown argument %s\n", a.c_str()), 1;
  }
  if (dir.empty()) dir = std::filesystem::temp_directory_path() / ("xtimer_merge_bench." + std::to_string(getpid()));

  if (merge_only) {
    auto t0 = std::chrono::steady_clock::now();
    xtimer::MergedStacks merged;
    std::string error;
    xtimer::FolderOptions options;
    options.threads = jobs;
    if (!xtimer::MergeStackFolder(dir, {}, options, &merged, &error))
      return std::fprintf(stderr, "%s\n", error.c_str()), 2;
    auto t1 = std::chrono::steady_clock::now();
    xtimer::Verdict verdict = xtimer::ComputeVerdict(merged);
    auto t2 = std::chrono::steady_clock::now();
    xtimer::OutputResult result;
    xtimer::OutputOptions out;
    if (!xtimer::WriteMergeOutputs(merged, verdict, out, dir + "/out", &result, &error))
      return std::fprintf(stderr, "%s\n", error.c_str()), 3;
    auto t3 = std::chrono::steady_clock::now();
    auto s = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::printf(
        "read+merge %.2f s, verdict %.3f s, outputs %.2f s; %zu ranks, %zu frames, %zu python + %zu native tree "
        "nodes\n",
        s(t0, t1), s(t1, t2), s(t2, t3), merged.ranks.size(), merged.frames.size(), merged.python.size(),
        merged.native.size());
    for (const std::string& line : verdict.summary) std::printf("  %s\n", line.c_str());
    return verdict.suspects.size() == 3 ? 0 : 4;  // the three planted ranks
  }

  std::filesystem::create_directories(dir);
  auto g0 = std::chrono::steady_clock::now();
  std::vector<std::string> bodies;
  for (int k = 1; k < 12; ++k) bodies.push_back(ThreadBody(k, false, frames, 0));
  std::string main_ok = ThreadBody(0, true, frames, 0), main_odd = ThreadBody(0, true, frames, 1);
  uint64_t bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    std::string text = RankFile(r, ranks, threads, frames, bodies, main_ok, main_odd);
    char name[64];
    std::snprintf(name, sizeof name, "/%05d-%05d.stacktrace", r, ranks);
    FILE* f = std::fopen((dir + name).c_str(), "wb");
    if (f == nullptr || std::fwrite(text.data(), 1, text.size(), f) != text.size()) return std::perror("write"), 1;
    std::fclose(f);
    bytes += text.size();
  }
  // The generated files go to disk before the timing starts: their writeback (kernel threads on
  // the same cores, and the first fsync of an output file waiting 0.3-0.8 s for it) belongs to
  // the generation. They stay in the page cache.
  if (int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    syncfs(fd);
    close(fd);
  }
  double gen = std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count();
  std::printf("generated %d ranks x %d threads x %d frames: %.1f MB of stack files in %.1f s (not counted)\n", ranks,
              threads, frames, bytes / 1e6, gen);
  std::fflush(stdout);

  // The two JSON back ends of the reader on the same files, one thread, parsing only.
  {
    std::vector<std::string> sample;
    for (int r = 0; r < std::min(ranks, 32); ++r)
      sample.push_back(RankFile(r, ranks, threads, frames, bodies, main_ok, main_odd));
    size_t sample_bytes = 0;
    for (const std::string& t : sample) sample_bytes += t.size();
    xtimer::StackFile file;
    std::string error;
    auto rate = [&](auto parse) {
      auto t0 = std::chrono::steady_clock::now();
      for (const std::string& t : sample)
        if (!parse(t)) return std::fprintf(stderr, "parse failed: %s\n", error.c_str()), 0.0;
      return sample_bytes / 1e6 / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    double nl = rate([&](const std::string& t) { return xtimer::stack_reader::ParseWithNlohmann(t, &file, &error); });
    double sj = rate([&](const std::string& t) { return xtimer::ParseStackFile(t, &file, &error); });
    std::printf(
        "parse only, 1 thread, %zu files: simdjson %.0f MB/s, nlohmann-json (the tests' reference reader) "
        "%.0f MB/s\n",
        sample.size(), sj, nl);
    std::fflush(stdout);
  }

  // Read + merge + verdict + outputs in a child, so its peak RSS is the merge's alone.
  auto m0 = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    std::string j = std::to_string(jobs);
    execl("/proc/self/exe", argv[0], "--merge-only", "--dir", dir.c_str(), "--jobs", j.c_str(), nullptr);
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
  std::printf("merge of %d stack files: wall %.2f s, cpu %.2f s user + %.2f s sys, peak RSS %.0f MiB\n", ranks, wall,
              Seconds(ru.ru_utime), Seconds(ru.ru_stime), ru.ru_maxrss / 1024.0);
  std::printf("goal: under 2 s and under 1024 MiB on 2 cores: %s\n",
              wall < 2.0 && ru.ru_maxrss < 1024 * 1024 ? "met" : "NOT met");
  if (!keep) std::filesystem::remove_all(dir);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 5;
}
