#include "launcher/run/etcd_client.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace xtimer::run {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int64_t JsonInt(const nlohmann::json& j, const char* key) {
  // The gateway writes int64 fields as strings.
  if (!j.contains(key)) return 0;
  const nlohmann::json& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) return std::strtoll(v.get<std::string>().c_str(), nullptr, 10);
  return 0;
}

}  // namespace

std::string Base64Encode(const std::string& in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t n = (uint8_t)in[i] << 16 | (uint8_t)in[i + 1] << 8 | (uint8_t)in[i + 2];
    for (int k = 18; k >= 0; k -= 6) out.push_back(kAlphabet[(n >> k) & 63]);
  }
  if (i + 1 == in.size()) {
    uint32_t n = (uint8_t)in[i] << 16;
    out += {kAlphabet[n >> 18 & 63], kAlphabet[n >> 12 & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    uint32_t n = (uint8_t)in[i] << 16 | (uint8_t)in[i + 1] << 8;
    out += {kAlphabet[n >> 18 & 63], kAlphabet[n >> 12 & 63], kAlphabet[n >> 6 & 63], '='};
  }
  return out;
}

bool Base64Decode(const std::string& in, std::string* out) {
  out->clear();
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const char* p = std::strchr(kAlphabet, c);
    if (p == nullptr || c == '\0') return false;
    acc = acc << 6 | static_cast<uint32_t>(p - kAlphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return true;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::EtcdClient(std::string endpoint, double timeout_s) : endpoint_(std::move(endpoint)), timeout_s_(timeout_s) {
  std::string hp = endpoint_;
  if (hp.rfind("http://", 0) == 0) hp = hp.substr(7);
  while (!hp.empty() && hp.back() == '/') hp.pop_back();
  size_t colon = hp.rfind(':');
  host_ = hp.substr(0, colon);
  if (colon != std::string::npos) port_ = std::atoi(hp.substr(colon + 1).c_str());
}

EtcdClient::~EtcdClient() { StopWatch(); }

bool EtcdClient::Call(const std::string& path, const std::string& body, std::string* reply, std::string* error) {
  httplib::Client cli(host_, port_);
  auto secs = static_cast<time_t>(timeout_s_);
  auto usecs = static_cast<time_t>((timeout_s_ - secs) * 1e6);
  cli.set_connection_timeout(secs, usecs);
  cli.set_read_timeout(secs, usecs);
  cli.set_write_timeout(secs, usecs);
  httplib::Result res = cli.Post(path, body, "application/json");
  if (!res) {
    *error = "etcd at " + endpoint_ + " cannot be reached (" + httplib::to_string(res.error()) +
             "); check --rdzv-endpoint and that etcd runs";
    return false;
  }
  if (res->status != 200) {
    std::string msg = res->body.substr(0, 200);
    try {
      nlohmann::json j = nlohmann::json::parse(res->body);
      if (j.contains("message")) msg = j["message"].get<std::string>();
      else if (j.contains("error")) msg = j["error"].get<std::string>();
    } catch (...) {
    }
    *error = "etcd at " + endpoint_ + " answered " + std::to_string(res->status) + " to " + path + ": " + msg;
    return false;
  }
  *reply = std::move(res->body);
  return true;
}

bool EtcdClient::Get(const std::string& key, std::string* value, bool* found, std::string* error) {
  std::string reply;
  if (!Call("/v3/kv/range", nlohmann::json{{"key", Base64Encode(key)}}.dump(), &reply, error)) return false;
  *found = false;
  value->clear();
  try {
    nlohmann::json j = nlohmann::json::parse(reply);
    if (j.contains("kvs") && !j["kvs"].empty()) {
      *found = true;
      Base64Decode(j["kvs"][0].value("value", ""), value);
    }
  } catch (const std::exception& e) {
    return (*error = std::string("etcd at ") + endpoint_ + " sent a reply that is not JSON: " + e.what()), false;
  }
  return true;
}

bool EtcdClient::GetPrefix(const std::string& prefix, std::vector<KeyValue>* out, std::string* error) {
  std::string reply;
  nlohmann::json req = {{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))}};
  if (!Call("/v3/kv/range", req.dump(), &reply, error)) return false;
  out->clear();
  try {
    nlohmann::json j = nlohmann::json::parse(reply);
    if (j.contains("kvs")) {
      for (const auto& kv : j["kvs"]) {
        KeyValue e;
        Base64Decode(kv.value("key", ""), &e.key);
        Base64Decode(kv.value("value", ""), &e.value);
        e.create_revision = JsonInt(kv, "create_revision");
        e.mod_revision = JsonInt(kv, "mod_revision");
        out->push_back(std::move(e));
      }
    }
  } catch (const std::exception& e) {
    return (*error = std::string("etcd at ") + endpoint_ + " sent a reply that is not JSON: " + e.what()), false;
  }
  return true;
}

bool EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease, std::string* error) {
  nlohmann::json req = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  std::string reply;
  return Call("/v3/kv/put", req.dump(), &reply, error);
}

bool EtcdClient::Delete(const std::string& key, std::string* error) {
  std::string reply;
  return Call("/v3/kv/deleterange", nlohmann::json{{"key", Base64Encode(key)}}.dump(), &reply, error);
}

bool EtcdClient::CreateIfAbsent(const std::string& key, const std::string& value, int64_t lease, bool* created,
                                std::string* error) {
  nlohmann::json put = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  nlohmann::json req = {
      {"compare", {{{"key", Base64Encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}}},
      {"success", {{{"request_put", put}}}}};
  std::string reply;
  if (!Call("/v3/kv/txn", req.dump(), &reply, error)) return false;
  try {
    *created = nlohmann::json::parse(reply).value("succeeded", false);
  } catch (const std::exception& e) {
    return (*error = std::string("etcd at ") + endpoint_ + " sent a reply that is not JSON: " + e.what()), false;
  }
  return true;
}

bool EtcdClient::CompareAndSwap(const std::string& key, const std::string& expected, const std::string& value,
                                bool* swapped, std::string* error) {
  nlohmann::json req = {
      {"compare",
       {{{"key", Base64Encode(key)}, {"target", "VALUE"}, {"result", "EQUAL"}, {"value", Base64Encode(expected)}}}},
      {"success", {{{"request_put", {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}}}}}}};
  std::string reply;
  if (!Call("/v3/kv/txn", req.dump(), &reply, error)) return false;
  try {
    *swapped = nlohmann::json::parse(reply).value("succeeded", false);
  } catch (const std::exception& e) {
    return (*error = std::string("etcd at ") + endpoint_ + " sent a reply that is not JSON: " + e.what()), false;
  }
  return true;
}

bool EtcdClient::GrantLease(int64_t ttl_s, int64_t* lease, std::string* error) {
  std::string reply;
  if (!Call("/v3/lease/grant", nlohmann::json{{"TTL", std::to_string(ttl_s)}}.dump(), &reply, error)) return false;
  try {
    nlohmann::json j = nlohmann::json::parse(reply);
    *lease = JsonInt(j, "ID");
    if (*lease == 0) return (*error = "etcd at " + endpoint_ + " granted no lease: " + reply.substr(0, 200)), false;
  } catch (const std::exception& e) {
    return (*error = std::string("etcd at ") + endpoint_ + " sent a reply that is not JSON: " + e.what()), false;
  }
  return true;
}

bool EtcdClient::KeepAlive(int64_t lease, std::string* error) {
  std::string reply;
  if (!Call("/v3/lease/keepalive", nlohmann::json{{"ID", std::to_string(lease)}}.dump(), &reply, error)) return false;
  try {
    // A stream of one message: {"result": {"ID": ..., "TTL": ...}}; TTL 0 or absent: the lease is gone.
    nlohmann::json j = nlohmann::json::parse(reply.substr(0, reply.find('\n')));
    if (JsonInt(j.value("result", nlohmann::json::object()), "TTL") <= 0)
      return (*error = "the etcd lease " + std::to_string(lease) + " has expired"), false;
  } catch (const std::exception& e) {
    return (*error = std::string("etcd at ") + endpoint_ + " sent a reply that is not JSON: " + e.what()), false;
  }
  return true;
}

bool EtcdClient::RevokeLease(int64_t lease, std::string* error) {
  std::string reply;
  return Call("/v3/lease/revoke", nlohmann::json{{"ID", std::to_string(lease)}}.dump(), &reply, error);
}

void EtcdClient::Watch(const std::string& prefix, std::function<void()> on_event) {
  StopWatch();
  watch_stop_ = false;
  watch_thread_ = std::thread([this, prefix, on_event = std::move(on_event)] { WatchLoop(prefix, on_event); });
}

void EtcdClient::WatchLoop(std::string prefix, std::function<void()> on_event) {
  nlohmann::json req = {
      {"create_request", {{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(PrefixEnd(prefix))}}}};
  std::string body = req.dump();
  while (!watch_stop_) {
    httplib::Client cli(host_, port_);
    cli.set_connection_timeout(static_cast<time_t>(timeout_s_), 0);
    cli.set_read_timeout(24 * 3600, 0);  // a watch is quiet until something changes
    {
      MutexLock lock(watch_mu_);
      if (watch_stop_) break;
      watch_client_ = &cli;
    }
    httplib::Request r;
    r.method = "POST";
    r.path = "/v3/watch";
    r.body = body;
    r.set_header("Content-Type", "application/json");
    r.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      // The first message confirms the watch; each later one carries events. Either way the
      // caller re-reads the keys, so a change made before the watch began is seen too.
      on_event();
      return !watch_stop_;
    };
    cli.send(r);
    {
      MutexLock lock(watch_mu_);
      watch_client_ = nullptr;
    }
    if (watch_stop_) break;
    on_event();  // the stream broke: whatever changed meanwhile is re-read
    for (int i = 0; i < 10 && !watch_stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void EtcdClient::StopWatch() {
  {
    MutexLock lock(watch_mu_);
    watch_stop_ = true;
    if (watch_client_ != nullptr) watch_client_->stop();
  }
  if (watch_thread_.joinable()) watch_thread_.join();
}

}  // namespace xtimer::run
