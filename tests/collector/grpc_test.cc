// The gRPC service over the core (collector/collector_server.h) with in-test clients: the happy
// path, tokens, garbage on the port, malformed/oversized/out-of-order messages, a restart, TLS,
// many command streams. Throughout, a well-behaved agent must stay unaffected.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "collector.grpc.pb.h"
#include "collector/collector_core.h"
#include "collector/collector_server.h"
#include "tests/viewer/stack_json.h"

namespace xtimer::collector {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Json(int32_t rank, int32_t world) {
  StackFile f = testing::MakeRank(rank, world,
                                  {testing::Py("<module>", "/job/train.py", 1),
                                   testing::Py(rank == 5 ? "load_batch" : "all_reduce", "/job/train.py", 2)},
                                  {testing::Native("_start", "/usr/bin/python3.11")});
  return testing::StackFileToJson(f);
}

// A hand-driven agent: sync calls, and a thread reading its Commands stream. A DUMP in a
// report's reply counts like one on the stream, as in the node agent.
class TestAgent {
 public:
  TestAgent(int port, std::string token = "", std::shared_ptr<grpc::ChannelCredentials> creds = nullptr)
      : token_(std::move(token)) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 300);
    args.SetInt("grpc.testing.unique_channel", next_++);  // own connection per agent
    channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                         creds ? creds : grpc::InsecureChannelCredentials(), args);
    stub_ = v1::Collector::NewStub(channel_);
  }
  ~TestAgent() { CloseCommands(); }

  void Prepare(grpc::ClientContext* ctx, int deadline_ms = 5000) {
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  }

  grpc::Status Register(const std::string& node, int first_rank, int n, int world) {
    v1::RegisterRequest req;
    req.set_protocol_version(1);
    req.set_node(node);
    req.set_agent_id(node + "-agent");
    first_ = first_rank, n_ = n, world_ = world;
    for (int r = first_rank; r < first_rank + n; ++r) {
      v1::Rank* m = req.add_ranks();
      m->set_rank(r);
      m->set_world_size(world);
      m->set_host(node);
    }
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::RegisterReply reply;
    grpc::Status st = stub_->Register(&ctx, req, &reply);
    if (st.ok()) session_ = reply.session();
    return st;
  }

  grpc::Status Report(bool* known, std::set<int> hung = {}) {
    v1::ReportRequest req;
    req.set_session(session_);
    for (int r = first_; r < first_ + n_; ++r) {
      v1::RankReport* rr = req.add_reports();
      rr->mutable_rank()->set_rank(r);
      rr->mutable_rank()->set_world_size(world_);
      rr->set_state(hung.contains(r) ? v1::RANK_STATE_HUNG : v1::RANK_STATE_RUNNING);
    }
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::ReportReply reply;
    grpc::Status st = stub_->Report(&ctx, req, &reply);
    *known = reply.known();
    if (st.ok() && reply.command().kind() == v1::Command::DUMP) {
      std::lock_guard<std::mutex> lock(mu_);
      RecordLocked(reply.command());
      ++dumps_in_replies_;
    }
    return st;
  }

  bool ReportOk() {
    bool known = false;
    return Report(&known).ok() && known;
  }

  grpc::Status Upload(const std::string& dump_id, int rank, std::string json, v1::UploadReply* reply) {
    v1::StackUpload u;
    u.set_session(session_);
    u.set_dump_id(dump_id);
    u.set_rank(rank);
    u.set_stack_json(std::move(json));
    grpc::ClientContext ctx;
    Prepare(&ctx, 20000);
    return stub_->UploadStacks(&ctx, u, reply);
  }

  void OpenCommands() {
    CloseCommands();
    ctx_ = std::make_unique<grpc::ClientContext>();
    if (!token_.empty()) ctx_->AddMetadata("authorization", "Bearer " + token_);
    v1::CommandsRequest req;
    req.set_session(session_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = false;
    }
    reader_ = std::thread([this, req] {
      auto stream = stub_->Commands(ctx_.get(), req);
      v1::Command c;
      while (stream->Read(&c)) {
        std::lock_guard<std::mutex> lock(mu_);
        RecordLocked(c);
      }
      grpc::Status st = stream->Finish();
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
      end_status_ = st;
      cv_.notify_all();
    });
  }

  void CloseCommands() {
    if (ctx_) ctx_->TryCancel();
    if (reader_.joinable()) reader_.join();
  }

  // The next DUMP (after the `seen` first ones), or "" after the timeout.
  std::string WaitDump(size_t seen, double timeout_s = 10) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return dumps_.size() > seen || ended_; });
    return dumps_.size() > seen ? dumps_[seen] : "";
  }

  // Whether the first DUMP said to hold the stacks until UPLOAD.
  bool FirstDumpWaits() {
    std::lock_guard<std::mutex> lock(mu_);
    return !dump_waits_.empty() && dump_waits_[0];
  }

  // The first UPLOAD command's dump id, or "" after the timeout.
  std::string WaitUploadGrant(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return !grants_.empty() || ended_; });
    return grants_.empty() ? "" : grants_[0];
  }

  bool WaitEnded(grpc::Status* st, double timeout_s = 10) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return ended_; });
    *st = end_status_;
    return ended_;
  }

  bool StreamOpen() {
    std::lock_guard<std::mutex> lock(mu_);
    return !ended_;
  }

  size_t dumps() {
    std::lock_guard<std::mutex> lock(mu_);
    return dumps_.size();
  }

  size_t dumps_in_replies() {
    std::lock_guard<std::mutex> lock(mu_);
    return dumps_in_replies_;
  }

  std::string& session() { return session_; }
  v1::Collector::Stub* stub() { return stub_.get(); }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }

 private:
  // A command from the stream or a reply.
  void RecordLocked(const v1::Command& c) {
    if (c.kind() == v1::Command::DUMP) dumps_.push_back(c.dump_id()), dump_waits_.push_back(c.wait_for_upload());
    if (c.kind() == v1::Command::UPLOAD) grants_.push_back(c.dump_id());
    cv_.notify_all();
  }

  static inline int next_ = 0;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Collector::Stub> stub_;
  std::string session_;
  int first_ = 0, n_ = 0, world_ = 0;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> dumps_, grants_;
  std::vector<bool> dump_waits_;
  size_t dumps_in_replies_ = 0;
  bool ended_ = true;
  grpc::Status end_status_;
};

class GrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xtimer-grpc-test-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    StopServer();
    fs::remove_all(dir_);
  }

  void StartServer(ServerOptions o = {}, int port = 0) {
    CoreOptions c;
    c.out_dir = dir_.string();
    c.dump_wait_s = 20;
    c.output_formats = 1 | 2;
    c.max_stack_bytes = 1 << 20;
    core_ = std::make_unique<CollectorCore>(c);
    o.listen = "127.0.0.1:" + std::to_string(port);
    o.max_message_bytes = (1 << 20) + 4096;
    std::string error;
    server_ = CollectorServer::Start(core_.get(), o, &error);
    ASSERT_TRUE(server_) << error;
    port_ = server_->port();
    stop_ticker_ = false;
    ticker_ = std::thread([this] {
      while (!stop_ticker_) {
        core_->Tick();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }

  void StopServer() {
    if (ticker_.joinable()) {
      stop_ticker_ = true;
      ticker_.join();
    }
    if (server_) server_->Shutdown(0.5);
    server_.reset();
    core_.reset();
  }

  // The well-behaved agent of node-a: ranks 0-3 of 8, its Commands stream open.
  void StartGoodAgent(const std::string& token = "") {
    good_ = std::make_unique<TestAgent>(port_, token);
    ASSERT_TRUE(good_->Register("node-a", 0, 4, 8).ok());
    ASSERT_TRUE(good_->ReportOk());
    good_->OpenCommands();
    WaitFor([&] { return core_->SessionsConnected() >= 1 && server_->command_streams_open() >= 1; });
  }

  // The good agent still works: reports are known, its stream is open.
  void ExpectGoodAgentUnaffected(const char* after) {
    SCOPED_TRACE(after);
    EXPECT_TRUE(good_->ReportOk());
    EXPECT_TRUE(good_->StreamOpen());
  }

  template <typename F>
  static bool WaitFor(F f, double timeout_s = 10) {
    auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < end) {
      if (f()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return f();
  }

  fs::path dir_;
  std::unique_ptr<CollectorCore> core_;
  std::unique_ptr<CollectorServer> server_;
  int port_ = 0;
  std::thread ticker_;
  std::atomic<bool> stop_ticker_{false};
  std::unique_ptr<TestAgent> good_;
};

TEST_F(GrpcTest, HangAsksEveryAgentAndUploadsMakeTheRound) {
  StartServer();
  StartGoodAgent();
  TestAgent b(port_);
  ASSERT_TRUE(b.Register("node-b", 4, 4, 8).ok());
  ASSERT_TRUE(b.ReportOk());
  b.OpenCommands();
  ASSERT_TRUE(WaitFor([&] { return server_->command_streams_open() == 2; }));
  bool known = false;
  ASSERT_TRUE(good_->Report(&known, {1}).ok());
  std::string id_a = good_->WaitDump(0), id_b = b.WaitDump(0);
  ASSERT_FALSE(id_a.empty());
  EXPECT_EQ(id_a, id_b);
  EXPECT_EQ(good_->dumps_in_replies(), 1u) << "the agent that reported the hang: in the reply";
  EXPECT_EQ(b.dumps_in_replies(), 0u) << "the silent one: on its Commands stream, at the fan-out tick";
  EXPECT_EQ(good_->dumps(), 1u) << "asked once";
  for (int r = 0; r < 8; ++r) {
    v1::UploadReply reply;
    grpc::Status st = (r < 4 ? *good_ : b).Upload(id_a, r, Json(r, 8), &reply);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(reply.accepted()) << reply.reason();
  }
  ASSERT_TRUE(WaitFor([&] { return !core_->Rounds().empty() && core_->Rounds()[0].finished; }));
  RoundInfo r = core_->Rounds()[0];
  EXPECT_EQ(r.ranks_reported, "0-7");
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(fs::exists(r.dir + "/verdict.json"));
  EXPECT_TRUE(fs::exists(r.dir + "/00005-00008.stacktrace"));
}

TEST_F(GrpcTest, TokenIsRequiredOnEveryCall) {
  ServerOptions o;
  o.token = "s3cret-token";
  StartServer(o);
  StartGoodAgent("s3cret-token");
  for (const std::string& token : {std::string(""), std::string("wrong-token"), std::string("s3cret-tokeN")}) {
    SCOPED_TRACE("token '" + token + "'");
    TestAgent bad(port_, token);
    EXPECT_EQ(bad.Register("node-x", 4, 4, 8).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    bad.session() = good_->session();  // even with a valid session
    bool known = true;
    EXPECT_EQ(bad.Report(&known, {4}).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::UploadReply reply;
    EXPECT_EQ(bad.Upload("", 0, Json(0, 8), &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    bad.OpenCommands();
    grpc::Status st;
    ASSERT_TRUE(bad.WaitEnded(&st));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    ExpectGoodAgentUnaffected("bad token");
  }
  EXPECT_EQ(server_->unauthenticated_calls(), 12u);
  EXPECT_TRUE(core_->Rounds().empty()) << "the refused hung report started nothing";
  // The good agent's hang still works end to end.
  bool known = false;
  ASSERT_TRUE(good_->Report(&known, {2}).ok());
  EXPECT_FALSE(good_->WaitDump(0).empty());
  PrometheusText t;
  server_->AppendMetrics(&t);
  EXPECT_NE(t.Text().find("xtimer_collector_unauthenticated_calls_total 12\n"), std::string::npos) << t.Text();
}

// Raw bytes to the port: random junk, HTTP/1.1, an HTTP/2 preface followed by junk frames, a gRPC
// message header announcing 4 GiB.
TEST_F(GrpcTest, GarbageOnThePortHarmsNoOne) {
  StartServer();
  StartGoodAgent();
  std::mt19937 rng(42);
  std::vector<std::string> payloads;
  std::string junk(65536, '\0');
  for (char& c : junk) c = static_cast<char>(rng());
  payloads.push_back(junk);
  payloads.push_back("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  payloads.push_back(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + junk.substr(0, 4096));
  std::string frames = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  frames += std::string("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);  // SETTINGS
  frames +=
      std::string("\x00\x00\x05\x00\x00\x00\x00\x00\x01\x00\xff\xff\xff\xff", 14);  // DATA, stream 1: 4 GiB message
  payloads.push_back(frames);
  for (size_t i = 0; i < payloads.size(); ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    (void)!send(fd, payloads[i].data(), payloads[i].size(), MSG_NOSIGNAL);
    timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    while (recv(fd, buf, sizeof buf, 0) > 0) {
    }
    close(fd);
    ExpectGoodAgentUnaffected(("garbage payload " + std::to_string(i)).c_str());
  }
}

// Well-formed gRPC calls whose message is not the method's protobuf.
TEST_F(GrpcTest, MalformedMessagesAreRefused) {
  StartServer();
  StartGoodAgent();
  grpc::GenericStub generic(good_->channel());
  for (const char* method : {"/xtimer.v1.Collector/Register", "/xtimer.v1.Collector/Report",
                             "/xtimer.v1.Collector/UploadStacks", "/xtimer.v1.Collector/NoSuchMethod"}) {
    SCOPED_TRACE(method);
    std::string bytes = "\xff\xff\xff\xff\x0f garbage that is not a protobuf message";
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status st) { done.set_value(st); });
    grpc::Status st = done.get_future().get();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    ExpectGoodAgentUnaffected(method);
  }
}

TEST_F(GrpcTest, OversizedUploadIsRefusedUnread) {
  StartServer();
  StartGoodAgent();
  v1::UploadReply reply;
  grpc::Status st = good_->Upload("", 0, std::string(2 << 20, 'x'), &reply);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  ExpectGoodAgentUnaffected("oversized upload");
  // Under the gRPC bound but over the core's: refused with a reason.
  std::string big = Json(0, 8);
  big.append((1 << 20) + 10 - big.size(), ' ');
  st = good_->Upload("", 0, big, &reply);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(reply.accepted());
  EXPECT_NE(reply.reason().find("larger than the limit"), std::string::npos) << reply.reason();
  ExpectGoodAgentUnaffected("upload over the core's limit");
}

TEST_F(GrpcTest, CallsBeforeRegisterAreRefused) {
  StartServer();
  StartGoodAgent();
  TestAgent early(port_);
  early.session() = "never-registered";
  bool known = true;
  ASSERT_TRUE(early.Report(&known).ok());
  EXPECT_FALSE(known);
  v1::UploadReply reply;
  EXPECT_EQ(early.Upload("", 0, Json(0, 8), &reply).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  early.OpenCommands();
  grpc::Status st;
  ASSERT_TRUE(early.WaitEnded(&st));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("register again"), std::string::npos);
  // An upload for a round that does not exist, from a registered agent.
  ASSERT_TRUE(good_->Upload("0123456789abcdef", 0, Json(0, 8), &reply).ok());
  EXPECT_FALSE(reply.accepted());
  EXPECT_NE(reply.reason().find("unknown dump round"), std::string::npos);
  // Protocol version 2.
  v1::RegisterRequest req;
  req.set_protocol_version(2);
  grpc::ClientContext ctx;
  v1::RegisterReply rr;
  EXPECT_EQ(early.stub()->Register(&ctx, req, &rr).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ExpectGoodAgentUnaffected("out-of-order calls");
}

TEST_F(GrpcTest, RestartedCollectorIsJoinedAgain) {
  StartServer();
  StartGoodAgent();
  int port = port_;
  StopServer();
  grpc::Status st;
  ASSERT_TRUE(good_->WaitEnded(&st)) << "the command stream ends with the collector";
  StartServer({}, port);
  bool known = true;
  ASSERT_TRUE(WaitFor([&] { return good_->Report(&known).ok(); }));
  EXPECT_FALSE(known) << "a new collector does not know the old session";
  ASSERT_TRUE(good_->Register("node-a", 0, 4, 8).ok());
  EXPECT_TRUE(good_->ReportOk());
  good_->OpenCommands();
  ASSERT_TRUE(good_->Report(&known, {3}).ok());
  EXPECT_FALSE(good_->WaitDump(0).empty());
}

TEST_F(GrpcTest, SecondStreamOfASessionReplacesTheFirstAndAClosedOneNeedsANewRegistration) {
  StartServer();
  StartGoodAgent();
  // Same session, a second Commands stream (another TestAgent object as the carrier).
  TestAgent twin(port_);
  twin.session() = good_->session();
  twin.OpenCommands();
  grpc::Status st;
  ASSERT_TRUE(good_->WaitEnded(&st));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  TestAgent other(port_);  // another agent's hang: the session is asked on its stream
  ASSERT_TRUE(other.Register("node-b", 4, 4, 8).ok());
  bool known = false;
  ASSERT_TRUE(other.Report(&known, {4}).ok());
  EXPECT_FALSE(twin.WaitDump(0).empty()) << "the newer stream gets the commands";
  EXPECT_EQ(good_->dumps(), 0u);
  twin.CloseCommands();
  ASSERT_TRUE(WaitFor([&] { return core_->SessionsConnected() == 1; }));  // `other` only
  twin.OpenCommands();
  ASSERT_TRUE(twin.WaitEnded(&st));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(GrpcTest, ManyCommandStreams) {
  StartServer();
  constexpr int kAgents = 64;
  std::vector<std::unique_ptr<TestAgent>> agents;
  for (int i = 0; i < kAgents; ++i) {
    agents.push_back(std::make_unique<TestAgent>(port_));
    ASSERT_TRUE(agents.back()->Register("node-" + std::to_string(i), i * 2, 2, kAgents * 2).ok());
    agents.back()->OpenCommands();
  }
  ASSERT_TRUE(WaitFor([&] { return server_->command_streams_open() == kAgents; }));
  bool known = false;
  ASSERT_TRUE(agents[7]->Report(&known, {15}).ok());
  std::string id = agents[7]->WaitDump(0);
  ASSERT_FALSE(id.empty());
  for (auto& a : agents) EXPECT_EQ(a->WaitDump(0), id);
  // Uploads are paced (window 16): the others hold their stacks. None of these agents uploads,
  // so each group of 16 leaves the window after 2 s of silence and the next is told UPLOAD.
  std::vector<TestAgent*> waiting;
  for (auto& a : agents)
    if (a->FirstDumpWaits()) waiting.push_back(a.get());
  EXPECT_EQ(waiting.size(), size_t{kAgents - 16});
  for (TestAgent* a : waiting) EXPECT_EQ(a->WaitUploadGrant(15), id);
  agents.clear();
  EXPECT_TRUE(WaitFor([&] { return server_->command_streams_open() == 0; }));
}

TEST_F(GrpcTest, PortInUseIsAClearError) {
  StartServer();
  CoreOptions c;
  c.out_dir = dir_.string();
  CollectorCore core(c);
  ServerOptions o;
  o.listen = "127.0.0.1:" + std::to_string(port_);
  std::string error;
  EXPECT_FALSE(CollectorServer::Start(&core, o, &error));
  EXPECT_NE(error.find("in use"), std::string::npos) << error;
  o.listen = "127.0.0.1";
  EXPECT_FALSE(CollectorServer::Start(&core, o, &error));
  EXPECT_NE(error.find("HOST:PORT"), std::string::npos) << error;
}

TEST_F(GrpcTest, Tls) {
  fs::create_directories(dir_);
  std::string key = (dir_ / "key.pem").string(), cert = (dir_ / "cert.pem").string();
  std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -addext "
      "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
      key + " -out " + cert + " 2>/dev/null";
  if (system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl cannot make a test certificate";
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  ServerOptions o;
  o.tls_cert_pem = slurp(cert);
  o.tls_key_pem = slurp(key);
  o.token = "tls-token";
  StartServer(o);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = o.tls_cert_pem;
  TestAgent a(port_, "tls-token", grpc::SslCredentials(ssl));
  grpc::Status st = a.Register("node-a", 0, 4, 4);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(a.ReportOk());
  TestAgent plain(port_, "tls-token");
  EXPECT_EQ(plain.Register("node-b", 0, 4, 4).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A wrong key for the certificate: the server does not start.
  std::string other_key = (dir_ / "other.pem").string();
  ASSERT_EQ(system(("openssl genrsa -out " + other_key + " 2048 2>/dev/null").c_str()), 0);
  CoreOptions c;
  c.out_dir = dir_.string();
  CollectorCore core(c);
  ServerOptions bad = o;
  bad.tls_key_pem = slurp(other_key);
  bad.listen = "127.0.0.1:0";
  std::string error;
  EXPECT_FALSE(CollectorServer::Start(&core, bad, &error));
  EXPECT_NE(error.find("TLS"), std::string::npos) << error;
}

TEST_F(GrpcTest, ShutdownWithOpenStreamsIsQuick) {
  StartServer();
  StartGoodAgent();
  TestAgent b(port_);
  ASSERT_TRUE(b.Register("node-b", 4, 4, 8).ok());
  b.OpenCommands();
  ASSERT_TRUE(WaitFor([&] { return server_->command_streams_open() == 2; }));
  auto t0 = Clock::now();
  StopServer();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
}

}  // namespace
}  // namespace xtimer::collector
