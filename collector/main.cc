// xtimer_collector: the whole job's collector (README.md).
//
//   xtimer_collector --listen 127.0.0.1:18890 --out DIR [--http 127.0.0.1:18891]
//                    [--token-file F] [--tls-cert F --tls-key F] [--upload-window N]
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "collector/collector_core.h"
#include "collector/collector_server.h"
#include "common/atomic_file.h"
#include "common/env.h"
#include "common/log.h"
#include "common/parse_number.h"
#include "common/regular_file.h"

namespace {

using namespace xtimer;
using namespace xtimer::collector;

constexpr const char* kUsage =
    "usage: xtimer_collector --listen HOST:PORT --out DIR [--http HOST:PORT] [--token-file FILE]\n"
    "                        [--tls-cert FILE --tls-key FILE] [--upload-window N]\n"
    "  --listen      gRPC address for node agents (default 127.0.0.1:18890; loopback unless told)\n"
    "  --out         folder for dump rounds: DIR/<hang time>/ (stack files, flame graphs, verdict.json)\n"
    "  --http        serve /metrics, the status page and the rounds' files here (off by default)\n"
    "  --token-file  agents must send this token (metadata \"authorization: Bearer <token>\")\n"
    "  --tls-cert, --tls-key  PEM certificate chain and private key: gRPC over TLS\n"
    "  --upload-window  agents that upload a dump round's stacks at a time (default 16; 0 = all at once)\n";

// The usage, with the settings' defaults from the table (common/env.cc).
std::string Usage() {
  return std::string(kUsage) + "XTIMER_DUMP_WAIT (seconds, default " + env::Default("XTIMER_DUMP_WAIT") +
         "): how long a dump round waits for every rank's stacks.\n";
}

[[noreturn]] void Fail(const std::string& message, int code = 2) {
  std::fprintf(stderr, "xtimer_collector: %s\n", message.c_str());
  std::exit(code);
}

// A whole small file (a token, a PEM) by the common rule (common/regular_file.h); *error names
// the flag and the file.
bool ReadSmallFile(const std::string& flag, const std::string& path, size_t max, std::string* out, std::string* error) {
  std::string why;
  if (ReadRegularFile(path, FileRule{.what = "PEM or token file", .max_bytes = max}, out, &why)) return true;
  *error = flag + " " + path + " " + why;
  return false;
}

std::string ReadToken(const std::string& path) {
  std::string token, error;
  if (!ReadSmallFile("--token-file", path, 4096, &token, &error)) Fail(error);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  size_t start = 0;
  while (start < token.size() && std::isspace(static_cast<unsigned char>(token[start]))) ++start;
  token.erase(0, start);
  if (token.empty()) Fail("--token-file " + path + " is empty; put the token on its first line");
  for (unsigned char c : token)
    if (c < 0x21 || c > 0x7e)
      Fail("--token-file " + path +
           " holds a space, a line break or a non-ASCII character; a token is one word of printable ASCII");
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
    std::fprintf(stderr, "xtimer_collector: warning: --token-file %s can be read by other users (chmod 600 it)\n",
                 path.c_str());
  return token;
}

std::string ReadPem(const std::string& flag, const std::string& path) {
  std::string pem, error;
  if (!ReadSmallFile(flag, path, 1 << 20, &pem, &error)) Fail(error);
  if (pem.find("-----BEGIN ") == std::string::npos)
    Fail(flag + " " + path + " is not a PEM file (no \"-----BEGIN\" line)");
  return pem;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"--listen", "127.0.0.1:18890"}};
  static const char* kKnown[] = {"--listen",   "--out",     "--http",         "--token-file",
                                 "--tls-cert", "--tls-key", "--upload-window"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(Usage().c_str(), stdout);
      return 0;
    }
    std::string value;
    bool has_value = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a.resize(eq);
      has_value = true;
    }
    bool known = false;
    for (const char* k : kKnown) known |= a == k;
    if (!known) Fail("unknown option \"" + a + "\" (see --help)");
    if (!has_value) {
      if (i + 1 >= argc) Fail(a + " needs a value (see --help)");
      value = argv[++i];
    }
    if (value.empty()) Fail(a + " needs a non-empty value");
    flags[a] = value;
  }
  if (!flags.contains("--out")) Fail("--out DIR is required: the folder for dump rounds (see --help)");
  if (flags.contains("--tls-cert") != flags.contains("--tls-key"))
    Fail("--tls-cert and --tls-key go together (a PEM certificate chain and its private key)");

  ServerOptions server_options;
  server_options.listen = flags["--listen"];
  std::string host, error;
  int port = 0;
  if (!ParseListenAddress(server_options.listen, &host, &port, &error)) Fail("--listen " + error);
  if (flags.contains("--http")) {
    std::string h;
    int p;
    if (!ParseListenAddress(flags["--http"], &h, &p, &error)) Fail("--http " + error);
  }
  if (flags.contains("--token-file")) server_options.token = ReadToken(flags["--token-file"]);
  if (flags.contains("--tls-cert")) {
    server_options.tls_cert_pem = ReadPem("--tls-cert", flags["--tls-cert"]);
    server_options.tls_key_pem = ReadPem("--tls-key", flags["--tls-key"]);
  }
  const std::string out = flags["--out"];
  if (!MakeDirs(out, &error)) Fail("--out " + out + ": " + error);
  if (access(out.c_str(), W_OK | X_OK) != 0) Fail("--out " + out + ": cannot write into it: " + strerror(errno));

  CoreOptions core_options;
  core_options.out_dir = out;
  core_options.dump_wait_s = env::Double("XTIMER_DUMP_WAIT");
  core_options.slowdown = slowdown::JudgeOptions::FromEnv();
  if (!(core_options.dump_wait_s > 0) || core_options.dump_wait_s > 3600)
    Fail("XTIMER_DUMP_WAIT=" + env::String("XTIMER_DUMP_WAIT") + " is not a number of seconds in (0, 3600]");
  core_options.max_stack_bytes = 16 << 20;
  if (flags.contains("--upload-window")) {
    const std::string& w = flags["--upload-window"];
    long long n = 0;
    if (!ParseInt(w, 0, 100000, &n))
      Fail("--upload-window " + w + " is not a number of agents in [0, 100000] (0: all upload at once)");
    core_options.upload_window = static_cast<size_t>(n);
  }
  server_options.max_message_bytes = core_options.max_stack_bytes + (64 << 10);

  if (!IsLoopback(host)) {
    if (server_options.token.empty())
      std::fprintf(stderr,
                   "xtimer_collector: warning: listening on %s without --token-file: anyone who reaches the "
                   "port can report ranks and upload stacks\n",
                   server_options.listen.c_str());
    else if (server_options.tls_cert_pem.empty())
      std::fprintf(stderr,
                   "xtimer_collector: warning: listening on %s without TLS: the token travels in clear text "
                   "(--tls-cert/--tls-key)\n",
                   server_options.listen.c_str());
  }

  // Signals are taken by the main loop (sigtimedwait), not by handlers: block them before any
  // thread starts so that every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  CollectorCore core(core_options);
  std::unique_ptr<CollectorServer> server = CollectorServer::Start(&core, server_options, &error);
  if (!server)
    Fail("--listen " + error + (error.find("in use") != std::string::npos ? " (another collector?)" : ""), 1);
  std::unique_ptr<HttpFrontend> http;
  if (flags.contains("--http")) {
    CollectorServer* s = server.get();
    http = std::make_unique<HttpFrontend>(&core, [s](PrometheusText* t) { s->AppendMetrics(t); });
    if (!http->Start(flags["--http"], &error)) {
      server->Shutdown(0);
      Fail("--http " + error, 1);
    }
  }
  std::fprintf(stderr,
               "xtimer_collector: listening on %s:%d (gRPC%s%s)%s; dump rounds go to %s/<hang time>/ "
               "(waiting up to %g s for every rank)\n",
               host.c_str(), server->port(), server_options.tls_cert_pem.empty() ? "" : ", TLS",
               server_options.token.empty() ? "" : ", token required",
               http ? (", http://" + flags["--http"].substr(0, flags["--http"].rfind(':')) + ":" +
                       std::to_string(http->port()) + "/")
                          .c_str()
                    : "",
               out.c_str(), core_options.dump_wait_s);

  for (;;) {
    timespec tick = {0, 100 * 1000 * 1000};
    int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "xtimer_collector: %s: stopping (open dump rounds are merged first)\n", strsignal(sig));
      break;
    }
    core.Tick();
  }
  if (http) http->Stop();
  server->Shutdown(2);
  core.FinishRounds();
  return 0;
}
