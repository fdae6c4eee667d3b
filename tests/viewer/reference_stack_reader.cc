// The tests' reference stack-file reader: nlohmann-json's SAX interface (no DOM) filling StackFile
// as the parser walks the document. Written independently of the product's simdjson reader, so
// the tests and the fuzz target can hold that one to it (tests/viewer/reference_stack_reader.h).
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "tests/viewer/reference_stack_reader.h"

#include "common/stacks/stack_reader_impl.h"

namespace xtimer::stack_reader {
namespace {

using Json = nlohmann::json;

// Where the parser is in the document. Anything not listed (unknown keys, their contents) is
// kSkip, so a writer may add fields without breaking this reader.
enum class Ctx : uint8_t {
  kRoot,
  kProcessState,
  kOps,
  kOp,
  kThreads,
  kThread,
  kNative,
  kNativeFrame,
  kPython,
  kPythonFrame,
  kSkip
};

// A SAX handler (nlohmann's interface, no DOM): the stack file goes straight into StackFile.
// A DOM would double the time of a 4,096-rank merge and hold each file twice in memory.
class Handler {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  Handler(StackFile* out, ParseState& st) : out_(out), st_(st) { ResetHeader(out); }

  bool null() { return Scalar(Kind::kNull, 0, 0, false, nullptr); }
  bool boolean(bool v) { return Scalar(Kind::kBool, 0, 0, v, nullptr); }
  bool number_integer(number_integer_t v) { return Scalar(Kind::kInt, v, double(v), false, nullptr); }
  bool number_unsigned(number_unsigned_t v) {
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Scalar(Kind::kFloat, 0, double(v), false, nullptr);
    return Scalar(Kind::kInt, static_cast<int64_t>(v), double(v), false, nullptr);
  }
  bool number_float(number_float_t v, const string_t&) { return Scalar(Kind::kFloat, 0, v, false, nullptr); }
  bool string(string_t& s) { return Scalar(Kind::kString, 0, 0, false, &s); }
  bool binary(binary_t&) { return Scalar(Kind::kNull, 0, 0, false, nullptr); }

  bool key(string_t& k) {
    key_.assign(k);
    return true;
  }

  bool start_object(std::size_t) {
    if (stack_.empty()) return Push(Ctx::kRoot);
    Ctx top = stack_.back();
    switch (top) {
      case Ctx::kRoot:
        if (key_ == "process_state") return Push(Ctx::kProcessState);
        break;
      case Ctx::kOps:
        NextElement(out_->inflight_ops, &ops_used_, [](InflightOp& o) { o = InflightOp(); });
        return Push(Ctx::kOp);
      case Ctx::kThreads: {
        StackThread& t = NextElement(out_->threads, &threads_used_, ResetThread);
        thread_ = &t;
        native_used_ = python_used_ = 0;
        return Push(Ctx::kThread);
      }
      case Ctx::kNative:
        frame_native_ = &NextElement(thread_->native, &native_used_, ResetNative);
        return Push(Ctx::kNativeFrame);
      case Ctx::kPython:
        frame_python_ = &NextElement(thread_->python, &python_used_, ResetPython);
        return Push(Ctx::kPythonFrame);
      default: break;
    }
    if (top != Ctx::kSkip && !IsObject(top)) TypeError("an array element", "an object");
    if ((top == Ctx::kRoot && (key_ == "threads" || key_ == "inflight_ops")) ||
        (top == Ctx::kThread && (key_ == "native" || key_ == "python")))
      TypeError(key_, "an array");
    return Push(Ctx::kSkip);
  }

  bool end_object() {
    Ctx top = stack_.back();
    stack_.pop_back();
    if (top == Ctx::kThread) {
      thread_->native.resize(native_used_);
      thread_->python.resize(python_used_);
    }
    return true;
  }

  bool start_array(std::size_t) {
    if (stack_.empty()) return Fail("not a JSON object");
    Ctx top = stack_.back();
    if (top == Ctx::kRoot && key_ == "inflight_ops") {
      ops_used_ = 0;
      return Push(Ctx::kOps);
    }
    if (top == Ctx::kRoot && key_ == "threads") {
      threads_used_ = 0;
      st_.saw_threads = true;
      return Push(Ctx::kThreads);
    }
    if (top == Ctx::kThread && key_ == "native") {
      native_used_ = 0;
      return Push(Ctx::kNative);
    }
    if (top == Ctx::kThread && key_ == "python") {
      python_used_ = 0;
      return Push(Ctx::kPython);
    }
    if (top != Ctx::kSkip && !IsObject(top)) TypeError("an array element", "an object, not an array");
    if (top == Ctx::kRoot && key_ == "process_state") TypeError(key_, "an object");
    return Push(Ctx::kSkip);
  }

  bool end_array() {
    Ctx top = stack_.back();
    stack_.pop_back();
    if (top == Ctx::kOps) out_->inflight_ops.resize(ops_used_);
    if (top == Ctx::kThreads) out_->threads.resize(threads_used_);
    if (top == Ctx::kNative) thread_->native.resize(native_used_);
    if (top == Ctx::kPython) thread_->python.resize(python_used_);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 7: ..." -> from "parse error".
    size_t p = what.find("] ");
    st_.syntax_error = "not valid JSON: " + (p == std::string::npos ? what : what.substr(p + 2));
    return false;
  }

 private:
  enum class Kind { kNull, kBool, kInt, kFloat, kString };

  static bool IsObject(Ctx c) {
    return c == Ctx::kRoot || c == Ctx::kProcessState || c == Ctx::kOp || c == Ctx::kThread || c == Ctx::kNativeFrame ||
           c == Ctx::kPythonFrame;
  }

  bool Push(Ctx c) {
    if (c == Ctx::kRoot) st_.saw_root = true;
    stack_.push_back(c);
    return true;
  }

  bool Fail(std::string msg) {
    st_.syntax_error = std::move(msg);
    return false;
  }

  bool TypeError(std::string_view field, std::string_view expected) {
    st_.TypeError(field, expected);
    return true;
  }

  bool Str(Kind k, std::string* v, std::string* dst) {
    if (k == Kind::kNull) return dst->clear(), true;
    if (k != Kind::kString) return TypeError(key_, "a string");
    AssignCapped(*v, dst);  // the product's cap (stack_file.h), so the two readers agree
    return true;
  }
  bool Int(Kind k, int64_t v, int64_t* dst, bool null_ok = true) {
    if (k == Kind::kNull && null_ok) return true;
    if (k != Kind::kInt) return TypeError(key_, "an integer");
    *dst = v;
    return true;
  }
  bool Int32(Kind k, int64_t v, int32_t* dst) {
    if (k != Kind::kInt) return TypeError(key_, "an integer");
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
      return TypeError(key_, "a 32-bit integer");
    *dst = static_cast<int32_t>(v);
    return true;
  }
  bool Bool(Kind k, bool v, bool* dst) {
    if (k == Kind::kNull) return true;
    if (k != Kind::kBool) return TypeError(key_, "true or false");
    *dst = v;
    return true;
  }

  bool Scalar(Kind k, int64_t i, double d, bool b, std::string* s) {
    if (stack_.empty()) return Fail("not a JSON object");
    switch (stack_.back()) {
      case Ctx::kRoot: return RootField(k, i, b, s);
      case Ctx::kProcessState:
        if (key_ == "code") return Str(k, s, &out_->process_state_code);
        if (key_ == "name") return Str(k, s, &out_->process_state_name);
        return true;
      case Ctx::kOp: return OpField(k, i, d, s);
      case Ctx::kThread: return ThreadField(k, i, b, s);
      case Ctx::kNativeFrame: {
        NativeFrame& f = *frame_native_;
        if (key_ == "function") return Str(k, s, &f.function);
        if (key_ == "module") return Str(k, s, &f.module);
        if (key_ == "offset") return Str(k, s, &f.offset);
        if (key_ == "file") return Str(k, s, &f.file);
        if (key_ == "line") return Int(k, i, &f.line);
        if (key_ == "inlined") return Bool(k, b, &f.inlined);
        return true;
      }
      case Ctx::kPythonFrame: {
        PythonFrame& f = *frame_python_;
        if (key_ == "function") return Str(k, s, &f.function);
        if (key_ == "file") return Str(k, s, &f.file);
        if (key_ == "line") return Int(k, i, &f.line);
        return true;
      }
      case Ctx::kSkip: return true;
      case Ctx::kOps: return TypeError("inflight_ops", "objects");
      case Ctx::kThreads: return TypeError("threads", "objects");
      case Ctx::kNative: return TypeError("native", "objects");
      case Ctx::kPython: return TypeError("python", "objects");
    }
    return true;
  }

  bool RootField(Kind k, int64_t i, bool b, std::string* s) {
    if (key_ == "format") {
      st_.saw_format = true;
      return Str(k, s, &st_.format);
    }
    if (key_ == "version") {
      st_.saw_version = true;
      if (k != Kind::kInt || i > 1000000 || i < -1000000) return Fail("\"version\" is not a small integer");
      out_->version = static_cast<int>(i);
      return true;
    }
    if (key_ == "rank") return st_.saw_rank = true, Int32(k, i, &out_->rank);
    if (key_ == "world_size") return st_.saw_world = true, Int32(k, i, &out_->world_size);
    if (key_ == "local_rank") return k == Kind::kNull ? true : Int32(k, i, &out_->local_rank);
    if (key_ == "host") return Str(k, s, &out_->host);
    if (key_ == "pid") return Int(k, i, &out_->pid);
    if (key_ == "reason") return Str(k, s, &out_->reason);
    if (key_ == "time") return Str(k, s, &out_->time);
    if (key_ == "symbolized") return Bool(k, b, &out_->symbolized);
    if (key_ == "trigger") return Str(k, s, &out_->trigger);
    if (key_ == "threads" || key_ == "inflight_ops" || key_ == "process_state")
      return k == Kind::kNull ? true : TypeError(key_, key_ == "process_state" ? "an object" : "an array");
    return true;
  }

  bool OpField(Kind k, int64_t i, double d, std::string* s) {
    InflightOp& o = out_->inflight_ops[ops_used_ - 1];
    if (key_ == "name") return Str(k, s, &o.name);
    if (key_ == "kind") return Str(k, s, &o.kind);
    if (key_ == "stream") return Str(k, s, &o.stream);
    if (key_ == "comm") return Str(k, s, &o.comm);
    if (key_ == "state") return Str(k, s, &o.state);
    if (key_ == "comm_rank") return Int(k, i, &o.comm_rank);
    if (key_ == "comm_size") return Int(k, i, &o.comm_size);
    if (key_ == "seq") return Int(k, i, &o.seq);
    if (key_ == "peer") return Int(k, i, &o.peer);
    if (key_ == "bytes") return Int(k, i, &o.bytes);
    if (key_ == "blocked_by") return Int(k, i, &o.blocked_by);
    if (key_ == "in_flight_s") {
      if (k == Kind::kNull) return true;
      if (k != Kind::kInt && k != Kind::kFloat) return TypeError(key_, "a number");
      o.in_flight_s = d;
      return true;
    }
    return true;
  }

  bool ThreadField(Kind k, int64_t i, bool b, std::string* s) {
    StackThread& t = *thread_;
    if (key_ == "tid") return Int(k, i, &t.tid);
    if (key_ == "name") return Str(k, s, &t.name);
    if (key_ == "python_name") return Str(k, s, &t.python_name);
    if (key_ == "state") return Str(k, s, &t.state);
    if (key_ == "main") return Bool(k, b, &t.main);
    if (key_ == "holds_gil") {
      if (k == Kind::kNull) return t.holds_gil.reset(), true;
      if (k != Kind::kBool) return TypeError(key_, "true, false or null");
      t.holds_gil = b;
      return true;
    }
    if (key_ == "native" || key_ == "python") {
      if (k == Kind::kNull) {  // null reads as no frames
        (key_ == "native" ? native_used_ : python_used_) = 0;
        return true;
      }
      return TypeError(key_, "an array");
    }
    return true;
  }

  StackFile* out_;
  std::vector<Ctx> stack_;
  std::string key_;
  ParseState& st_;
  size_t ops_used_ = 0, threads_used_ = 0, native_used_ = 0, python_used_ = 0;
  StackThread* thread_ = nullptr;
  NativeFrame* frame_native_ = nullptr;
  PythonFrame* frame_python_ = nullptr;
};

}  // namespace

bool ParseWithNlohmann(std::string_view json, StackFile* out, std::string* error) {
  ParseState st;
  Handler handler(out, st);
  try {
    Json::sax_parse(json.begin(), json.end(), &handler, Json::input_format_t::json, true);
  } catch (const std::exception& e) {  // the parser reports through parse_error; this is a backstop
    if (st.syntax_error.empty()) st.syntax_error = std::string("not valid JSON: ") + e.what();
  }
  return FinishParse(st, *out, error);
}

}  // namespace xtimer::stack_reader
