// Step records from a C++ program under libxtimer_preload.so (LD_PRELOAD, set by the test), with
// everything that touches them at once: 2 forked ranks run GEMMs, a kernel and an all-reduce per
// step, while a second thread of each reports Python-like GC spans through the exported
// xtimer_python_span, and a stand-in agent on XTIMER_AGENT_SOCKET takes the `steps` messages and
// asks for samples (there is no Python here: the sampler says so and takes none). Checks the
// records in the file (the compact layout) and in the messages (layout 1) agree, the spans land in gc_s, nothing is
// lost. Built under TSan (XTIMER_SANITIZE=thread) it is the race check of the poller, the link thread and the span
// producers.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <poll.h>
#include <simgpu/kernel.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/steps/step_json.h"

extern "C" SIMGPU_KERNEL void sw_kernel(void** args) { simgpu_sleep_ns(*static_cast<int64_t*>(args[0])); }
SIMGPU_KERNEL_PARAMS(sw_kernel, sizeof(int64_t));

namespace {

constexpr int kRanks = 2;
constexpr int kSteps = 80;

#define CHECK(cond)                                                                                    \
  do {                                                                                                 \
    if (!(cond)) {                                                                                     \
      std::fprintf(stderr, "[pid %d] %s:%d: check failed: %s\n", getpid(), __FILE__, __LINE__, #cond); \
      return 1;                                                                                        \
    }                                                                                                  \
  } while (0)

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The stand-in agent: accepts the rank's connections, keeps the steps messages' records, sends
// one sample request to the first link that reports its status.
struct Agent {
  int listen_fd = -1;
  std::atomic<bool> stop{false};
  std::vector<nlohmann::json> records;
  int bad = 0, sample_requests = 0;
  std::set<int> asked;
  std::thread thread;

  bool Listen(const std::string& path) {
    listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    return bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(listen_fd, 8) == 0;
  }
  void Start() {
    thread = std::thread([this] { Loop(); });
  }
  void Loop() {
    std::vector<int> conns;
    std::vector<char> buf(1 << 20);
    for (;;) {
      std::vector<pollfd> fds = {{listen_fd, POLLIN, 0}};
      for (int c : conns) fds.push_back({c, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 100) <= 0) {
        if (stop.load()) return;  // the ranks are gone and everything they sent was read
        continue;
      }
      if (fds[0].revents & POLLIN) conns.push_back(accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        ssize_t n = recv(fds[i].fd, buf.data(), buf.size(), 0);
        if (n <= 0) {
          close(fds[i].fd);
          conns.erase(std::find(conns.begin(), conns.end(), fds[i].fd));
          continue;
        }
        auto msg = nlohmann::json::parse(std::string(buf.data(), size_t(n)), nullptr, false);
        if (msg.is_discarded()) {
          ++bad;
          continue;
        }
        std::string type = msg.value("type", "");
        if (type == "status" && asked.insert(fds[i].fd).second) {
          std::string req = R"({"type": "sample", "seconds": 30, "hz": 50})";
          send(fds[i].fd, req.data(), req.size(), MSG_NOSIGNAL);
          ++sample_requests;
        }
        if (type == "steps") {
          if (!msg.contains("world_size")) ++bad;
          for (auto& r : msg["records"]) records.push_back(r);
        }
      }
    }
  }
};

int Rank(int rank, const ncclUniqueId& id) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(kRanks).c_str(), 1);
  using SpanFn = void (*)(int, uint64_t, uint64_t);
  using HelloFn = int (*)(int, unsigned long);
  auto span = reinterpret_cast<SpanFn>(dlsym(RTLD_DEFAULT, "xtimer_python_span"));
  auto hello = reinterpret_cast<HelloFn>(dlsym(RTLD_DEFAULT, "xtimer_python_hello"));
  CHECK(span != nullptr && hello != nullptr);   // the library is preloaded and exports them
  CHECK((hello(2, 0) & 1) == 1);                // spans wanted
  CHECK(hello(1, 0) == 0 && hello(3, 0) == 0);  // another ABI: the module would install nothing

  CHECK(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream) == cudaSuccess);
  cublasHandle_t blas;
  CHECK(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS && cublasSetStream(blas, stream) == CUBLAS_STATUS_SUCCESS);
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, kRanks, id, rank) == ncclSuccess);
  float* buf = nullptr;
  CHECK(cudaMalloc(&buf, 1 << 20) == cudaSuccess);

  // "GC" spans from another thread, 1 ms of every 4.
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reported_ns{0};
  std::thread gc([&] {
    while (!done.load()) {
      uint64_t b = MonoNs();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      uint64_t e = MonoNs();
      span(1, b, e);
      span(7, b, e);  // not a kind: ignored
      span(2, e, b);  // backwards: ignored
      reported_ns += e - b;
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  });
  const float one = 1, zero = 0;
  for (int s = 0; s < kSteps; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the host's part
    for (int g = 0; g < 3; ++g)
      CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 2048, 2048, 2048, &one, buf, 2048, buf, 2048, &zero, buf,
                        2048) == CUBLAS_STATUS_SUCCESS);
    int64_t ns = 3000000;
    void* args[] = {&ns};
    CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(sw_kernel), dim3(1), dim3(1), args, 0, stream) == cudaSuccess);
    CHECK(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  }
  done = true;
  gc.join();
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  return 0;  // at exit the library writes and sends the last records (an atexit handler)
}

int Verify(const std::string& dir, const Agent& agent) {
  using xtimer::slowdown::StepFileReader;
  using xtimer::slowdown::StepRecord;
  CHECK(agent.bad == 0);
  CHECK(agent.sample_requests == kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    char name[64];
    std::snprintf(name, sizeof name, "/%05d-%05d.steps.jsonl", rank, kRanks);
    std::ifstream in(dir + "/tl" + name);
    CHECK(in.good());
    // The file, in the compact layout: a header, dictionary lines, step lines; nothing else.
    std::vector<StepRecord> recs;
    StepFileReader reader;
    size_t lines = 0, bytes = 0;
    for (std::string line; std::getline(in, line);) {
      ++lines;
      bytes += line.size() + 1;
      StepRecord r;
      std::string why;
      StepFileReader::Line kind = reader.Take(line, &r, &why);
      if (kind != StepFileReader::Line::kRecord && kind != StepFileReader::Line::kMeta)
        std::fprintf(stderr, "%s:%zu: %s\n", name + 1, lines, why.c_str());
      CHECK(kind == StepFileReader::Line::kRecord || kind == StepFileReader::Line::kMeta);
      if (kind == StepFileReader::Line::kRecord) recs.push_back(std::move(r));
    }
    // 80 steps of one all-reduce: found after 32, written up to the last ended one.
    std::fprintf(stderr, "rank %d: %zu step records, %zu lines, %zu bytes\n", rank, recs.size(), lines, bytes);
    CHECK(recs.size() >= 40 && recs.size() <= 48);
    // A header, the collective, the two kernel signatures: each string once, in at most three
    // dictionary lines (two for the signatures when the first step closed before the first
    // sw_kernel ended, as on a slow TSan run).
    CHECK(lines <= recs.size() + 4);
    double gc_s = 0, len_s = 0;
    unsigned gemms = 0;
    for (size_t i = 0; i < recs.size(); ++i) {
      const StepRecord& r = recs[i];
      CHECK(r.rank == rank && r.world == kRanks);
      if (i > 0) CHECK(r.step == recs[i - 1].step + 1);
      CHECK(r.colls.size() == 1 && r.colls[0].op == "AllReduce");  // timed: a collective without GPU times is dropped
      // Kernels go to the step their GPU start falls in: one issued just before the next step's
      // anchor may start just after it, so only the total is exact.
      for (const auto& k : r.kernels)
        if (k.sig == "GEMM f32 2048x2048x2048") gemms += k.n;
      CHECK(r.samples.empty());  // no Python: nothing sampled
      gc_s += r.gc_s;
      len_s += r.t_end - r.t_begin;
    }
    std::fprintf(stderr, "rank %d: %u GEMMs in %zu steps\n", rank, gemms, recs.size());
    CHECK(std::abs(static_cast<int>(gemms) - 3 * static_cast<int>(recs.size())) <= 3);
    // A quarter of the time is "GC" (1 ms of every 4 ms, from the other thread).
    std::fprintf(stderr, "rank %d: gc_s %.3f of %.3f s\n", rank, gc_s, len_s);
    CHECK(gc_s > 0.1 * len_s && gc_s < 0.5 * len_s);
    // The agent got the same records, the last ones included (sent at exit), in layout 1.
    std::map<int64_t, StepRecord> sent;
    for (const auto& j : agent.records) {
      StepRecord r;
      std::string why;
      CHECK(xtimer::slowdown::StepRecordFromJson(j, &r, &why));
      CHECK(!j["issue_latency_s"].is_null() && !j["colls"][0]["start"].is_null());  // from the first step on
      if (r.rank == rank) sent[r.step] = r;
    }
    std::fprintf(stderr, "rank %d: %zu records sent to the agent\n", rank, sent.size());
    CHECK(sent.size() == recs.size());
    for (const StepRecord& r : recs) {
      CHECK(sent.contains(r.step));
      const StepRecord& m = sent[r.step];
      CHECK(m.t_begin == r.t_begin && m.t_end == r.t_end && m.node == r.node && m.pid == r.pid);
      CHECK(m.colls.size() == 1 && m.colls[0].seq == r.colls[0].seq && m.colls[0].start == r.colls[0].start &&
            m.colls[0].end == r.colls[0].end && m.colls[0].comm == r.colls[0].comm);
      CHECK(m.kernels.size() == r.kernels.size());
      for (size_t k = 0; k < r.kernels.size(); ++k)
        CHECK(m.kernels[k].sig == r.kernels[k].sig && m.kernels[k].n == r.kernels[k].n &&
              std::abs(m.kernels[k].s - r.kernels[k].s) <= 1e-5 * r.kernels[k].s);
      CHECK(std::abs(m.gc_s - r.gc_s) <= 1e-5 * r.gc_s &&
            std::abs(m.issue_latency_s - r.issue_latency_s) <= 1e-5 * m.issue_latency_s);
    }
  }
  return 0;
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/xtimer-steps-workload-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  setenv("XTIMER_TIMELINE_PATH", (dir + "/tl").c_str(), 1);
  setenv("XTIMER_AGENT_SOCKET", (dir + "/agent.sock").c_str(), 1);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  Agent agent;
  if (!agent.Listen(dir + "/agent.sock")) return 1;
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(agent.listen_fd);
      exit(Rank(r, id));  // exit, not _exit: the library's atexit handler runs
    }
    pids.push_back(pid);
  }
  agent.Start();  // after the forks: the ranks inherit no thread of it
  int failed = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  agent.stop = true;
  agent.thread.join();
  if (failed) return 1;
  int rc = Verify(dir, agent);
  if (rc == 0) std::system(("rm -rf " + dir).c_str());
  std::printf(rc == 0 ? "ok\n" : "FAILED (kept %s)\n", dir.c_str());
  return rc;
}
