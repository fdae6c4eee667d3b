// A gRPC server of the collector's service whose handlers do nothing: the floor the load bench
// measures xtimer_collector against. Register hands out a session, Report answers known,
// UploadStacks accepts, and a Commands stream stays open and silent. Same transport settings
// as the collector (collector_server.cc). Prints the line tests/collector/collector_run.py waits
// for, then serves until SIGTERM or SIGINT.
//
//   null_collector --listen 127.0.0.1:0
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "collector.grpc.pb.h"
#include "common/grpc_defaults.h"

namespace {

using grpc::CallbackServerContext;
using grpc::Status;
namespace v1 = xtimer::v1;

// A Commands stream that writes nothing and ends when the agent goes.
class SilentStream final : public grpc::ServerWriteReactor<v1::Command> {
 public:
  void OnCancel() override { Finish(Status::CANCELLED); }
  void OnDone() override { delete this; }
};

class NullService final : public v1::Collector::CallbackService {
  grpc::ServerUnaryReactor* Register(CallbackServerContext* ctx, const v1::RegisterRequest*,
                                     v1::RegisterReply* reply) override {
    reply->set_session("null-" + std::to_string(++sessions_));
    reply->set_max_message_bytes((16 << 20) + (64 << 10));
    auto* r = ctx->DefaultReactor();
    r->Finish(Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* Report(CallbackServerContext* ctx, const v1::ReportRequest*,
                                   v1::ReportReply* reply) override {
    reply->set_known(true);
    auto* r = ctx->DefaultReactor();
    r->Finish(Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* UploadStacks(CallbackServerContext* ctx, const v1::StackUpload*,
                                         v1::UploadReply* reply) override {
    reply->set_accepted(true);
    auto* r = ctx->DefaultReactor();
    r->Finish(Status::OK);
    return r;
  }
  grpc::ServerWriteReactor<v1::Command>* Commands(CallbackServerContext*, const v1::CommandsRequest*) override {
    return new SilentStream;
  }
  std::atomic<uint64_t> sessions_{0};
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::strcmp(argv[1], "--listen") != 0) {
    std::fprintf(stderr, "usage: null_collector --listen HOST:PORT\n");
    return 2;
  }
  xtimer::UseGrpcDefaults();
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before gRPC starts its threads

  NullService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(argv[2], grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize((16 << 20) + (64 << 10));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "null_collector: cannot listen on %s\n", argv[2]);
    return 1;
  }
  std::string host = argv[2];
  host.resize(host.rfind(':'));
  std::fprintf(stderr, "null_collector: listening on %s:%d (gRPC, handlers that do nothing)\n", host.c_str(), port);
  int sig = 0;
  sigwait(&stop, &sig);
  server->Shutdown(std::chrono::system_clock::now());
  return 0;
}
