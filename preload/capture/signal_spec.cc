#include "preload/capture/signal_spec.h"

#include <signal.h>
#include <strings.h>

#include <charconv>

namespace xtimer::capture {
namespace {

struct Named {
  const char* name;
  int sig;
};

constexpr Named kNames[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT}, {"ILL", SIGILL},   {"TRAP", SIGTRAP},
    {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"USR1", SIGUSR1},
    {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},   {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},   {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU}, {"URG", SIGURG},     {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM},
    {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},     {"PWR", SIGPWR},   {"SYS", SIGSYS},
};

bool ParseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

bool StartsNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && strncasecmp(s.data(), prefix.data(), prefix.size()) == 0;
}

}  // namespace

int ParseSignalSpec(std::string_view spec) {
  while (!spec.empty() && spec.front() == ' ') spec.remove_prefix(1);
  while (!spec.empty() && spec.back() == ' ') spec.remove_suffix(1);
  if (EqualsNoCase(spec, "none") || EqualsNoCase(spec, "off") || spec == "0") return 0;
  int n = 0;
  if (ParseInt(spec, &n)) return (n > 0 && n < NSIG) ? n : -1;
  if (StartsNoCase(spec, "SIG")) spec.remove_prefix(3);
  for (const Named& named : kNames)
    if (EqualsNoCase(spec, named.name)) return named.sig;
  // SIGRTMIN/SIGRTMAX are run-time values in glibc (the first ones belong to NPTL).
  for (int is_max = 0; is_max < 2; ++is_max) {
    std::string_view base = is_max ? "RTMAX" : "RTMIN";
    if (!StartsNoCase(spec, base)) continue;
    std::string_view rest = spec.substr(base.size());
    int offset = 0;
    if (!rest.empty()) {
      if (rest.front() != (is_max ? '-' : '+') || !ParseInt(rest.substr(1), &offset) || offset < 0) return -1;
    }
    int sig = is_max ? SIGRTMAX - offset : SIGRTMIN + offset;
    return (sig >= SIGRTMIN && sig <= SIGRTMAX) ? sig : -1;
  }
  return -1;
}

std::string SignalName(int sig) {
  for (const Named& named : kNames)
    if (named.sig == sig) return std::string("SIG") + named.name;
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  return std::to_string(sig);
}

}  // namespace xtimer::capture
