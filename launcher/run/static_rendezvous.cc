#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/identity.h"
#include "common/log.h"
#include "launcher/run/round_rendezvous.h"

namespace xtimer::run {
namespace {

class StaticRendezvous : public Rendezvous {
 public:
  explicit StaticRendezvous(const RunOptions& o) : o_(o) {}

  bool Join(Round* round, std::string*) override {
    // Several static nodes are refused at parse time (run_options.cc): only one node gets here.
    if (o_.network_check && next_ == 0)
      Log(LogLevel::kInfo, "run: --network-check: one node alone has nobody to probe it with; nothing to check");
    round->number = next_++;
    round->restarts = restarts_;
    round->group_rank = o_.node_rank;
    round->group_world_size = o_.max_nodes;
    // --standalone: torchrun's workers meet at "localhost" (its c10d endpoint), whatever
    // --master-addr says.
    round->master_addr = o_.standalone ? "localhost" : o_.master_addr;
    // One node without a given port: a fresh free port each round (the last round's store may
    // still hold the old one in TIME_WAIT).
    round->master_port = (o_.max_nodes == 1 && !o_.master_port_given) ? FreePort() : o_.master_port;
    return true;
  }
  bool NewRoundNeeded(std::string*) override { return false; }
  void RequestRestart(const std::string&) override { ++restarts_; }
  void Finished() override {}
  void Leave() override {}
  std::string Name() const override { return o_.max_nodes == 1 ? "standalone" : "static"; }

 private:
  RunOptions o_;
  int64_t next_ = 0;
  int restarts_ = 0;
};

}  // namespace

std::unique_ptr<Rendezvous> MakeStaticRendezvous(const RunOptions& options) {
  return std::make_unique<StaticRendezvous>(options);
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

std::string LocalAddress(const RunOptions& options) {
  if (!options.local_addr.empty()) return options.local_addr;
  return HostName();
}

}  // namespace xtimer::run
