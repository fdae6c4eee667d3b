// A small etcd v3 client over etcd's JSON gateway (HTTP POST /v3/kv/..., /v3/lease/...,
// /v3/watch; keys and values travel base64-encoded). It covers what the rendezvous needs: get
// by key or prefix, put (optionally under a lease), a create-if-absent and a compare-value-and-
// put transaction, delete, leases with keep-alive, and a watch on a prefix.
//
// Every call has a deadline (`timeout_s`) and returns false with *error (one line naming the
// endpoint) when etcd cannot be reached or answers an error. Calls may come from any thread;
// each call uses its own connection. The watch runs on its own thread until Stop().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace httplib {
class Client;
}

namespace xtimer::run {

struct KeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0;
};

class EtcdClient {
 public:
  // endpoint: host:port (an http:// prefix is accepted).
  explicit EtcdClient(std::string endpoint, double timeout_s = 5);
  ~EtcdClient();

  const std::string& endpoint() const { return endpoint_; }

  // Nothing found: true with *out empty / *found false.
  bool Get(const std::string& key, std::string* value, bool* found, std::string* error);
  bool GetPrefix(const std::string& prefix, std::vector<KeyValue>* out, std::string* error);
  bool Put(const std::string& key, const std::string& value, int64_t lease, std::string* error);
  bool Delete(const std::string& key, std::string* error);
  // Puts `value` only if `key` does not exist. *created says whether it did.
  bool CreateIfAbsent(const std::string& key, const std::string& value, int64_t lease, bool* created,
                      std::string* error);
  // Puts `value` only if `key` holds exactly `expected`. *swapped says whether it did.
  bool CompareAndSwap(const std::string& key, const std::string& expected, const std::string& value, bool* swapped,
                      std::string* error);

  // A lease of `ttl_s` seconds; keys put under it vanish when it is not kept alive.
  bool GrantLease(int64_t ttl_s, int64_t* lease, std::string* error);
  // One keep-alive. False when the lease is gone (expired or revoked) or etcd is unreachable.
  bool KeepAlive(int64_t lease, std::string* error);
  bool RevokeLease(int64_t lease, std::string* error);

  // Calls `on_event` (from the watch thread) whenever a key under `prefix` changes; reconnects
  // after an error. One watch per client.
  void Watch(const std::string& prefix, std::function<void()> on_event);
  void StopWatch();

 private:
  bool Call(const std::string& path, const std::string& body, std::string* reply, std::string* error);
  void WatchLoop(std::string prefix, std::function<void()> on_event);

  std::string endpoint_, host_;
  int port_ = 2379;
  double timeout_s_;
  std::thread watch_thread_;
  std::atomic<bool> watch_stop_{false};
  Mutex watch_mu_;
  httplib::Client* watch_client_ XT_GUARDED_BY(watch_mu_) = nullptr;  // stopped from another thread
};

std::string Base64Encode(const std::string& in);
bool Base64Decode(const std::string& in, std::string* out);
// The smallest key greater than every key that starts with `prefix` (etcd's range_end).
std::string PrefixEnd(const std::string& prefix);

}  // namespace xtimer::run
