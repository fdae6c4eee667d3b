#include "common/identity.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

namespace xtimer {
namespace {

int NonNegative(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v < '0' || *v > '9') return -1;  // unset, empty, a sign or a space
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v, &end, 10);
  return (*end == '\0' && errno == 0 && n <= INT_MAX) ? static_cast<int>(n) : -1;
}

}  // namespace

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

RankEnv ReadRankEnv() {
  RankEnv r;
  r.rank = NonNegative("RANK");
  r.world_size = NonNegative("WORLD_SIZE");
  if (r.world_size == 0) r.world_size = -1;
  r.local_rank = NonNegative("LOCAL_RANK");
  return r;
}

}  // namespace xtimer
