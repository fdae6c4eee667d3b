// TellingEvictions (round_rendezvous.h): a rendezvous that passes every call on and, when an
// eviction was stored, says so to the one who asked.
#include <utility>

#include "launcher/run/round_rendezvous.h"

namespace xtimer::run {
namespace {

class TellingRendezvous : public Rendezvous {
 public:
  TellingRendezvous(std::unique_ptr<Rendezvous> inner, OnEvicted on_evicted)
      : inner_(std::move(inner)), on_evicted_(std::move(on_evicted)) {}

  bool Join(Round* round, std::string* error) override { return inner_->Join(round, error); }
  bool NewRoundNeeded(std::string* why) override { return inner_->NewRoundNeeded(why); }
  void RequestRestart(const std::string& why) override { inner_->RequestRestart(why); }
  void Finished() override { inner_->Finished(); }
  void Leave() override { inner_->Leave(); }
  int SparesWaiting() override { return inner_->SparesWaiting(); }
  bool Evict(const std::string& record, const std::string& reason, std::string* error) override {
    if (!inner_->Evict(record, reason, error)) return false;
    if (on_evicted_) on_evicted_(record, reason);
    return true;
  }
  int Evictions() override { return inner_->Evictions(); }
  std::string Name() const override { return inner_->Name(); }

 private:
  std::unique_ptr<Rendezvous> inner_;
  OnEvicted on_evicted_;
};

}  // namespace

std::unique_ptr<Rendezvous> TellingEvictions(std::unique_ptr<Rendezvous> inner, OnEvicted on_evicted) {
  return std::make_unique<TellingRendezvous>(std::move(inner), std::move(on_evicted));
}

}  // namespace xtimer::run
