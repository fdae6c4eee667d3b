// The simdjson back end of the stack reader (On Demand API): walks the document once and fills
// StackFile in place. Mirrors the nlohmann-json back end field for field, type rule for type rule;
// the tests run both on the same inputs and the fuzz corpus compares them.
#include <simdjson.h>

#include <limits>
#include <utility>

#include "common/stack_reader_impl.h"

namespace xtimer::stack_reader {
namespace {

namespace od = simdjson::ondemand;
using JT = od::json_type;

class Reader {
 public:
  Reader(StackFile* out, ParseState& st, const char* end) : out_(out), st_(st), end_(end) { ResetHeader(out); }

  bool Document(od::document& doc) {
    JT t{};
    if (Err(doc.type().get(t))) return false;
    if (t != JT::object) return true;  // saw_root stays false: "not a JSON object"
    od::object root;
    if (Err(doc.get_object().get(root))) return false;
    st_.saw_root = true;
    for (auto item : root) {
      od::field f;
      std::string_view key;
      if (Err(std::move(item).get(f)) || !Key(f, &key)) return false;
      if (!RootField(key, f.value())) return false;
    }
    // At the end, the location is out of bounds; anything else is content after the object.
    const char* rest = nullptr;
    if (doc.current_location().get(rest) == simdjson::SUCCESS) return Syntax("not valid JSON: content after the object");
    return true;
  }

 private:
  bool Err(simdjson::error_code e) {
    if (e == simdjson::SUCCESS) return false;
    if (st_.syntax_error.empty()) st_.syntax_error = std::string("not valid JSON: ") + simdjson::error_message(e);
    return true;
  }
  bool Syntax(std::string msg) {
    if (st_.syntax_error.empty()) st_.syntax_error = std::move(msg);
    return false;
  }
  // A field's key. Keys without an escape (all keys a writer of this format produces) are read in
  // place between their quotes; unescaping every key into simdjson's string buffer was a third of
  // the walk. A key with a backslash is unescaped, so "\u0072ank" still reads as "rank".
  bool Key(od::field& f, std::string_view* key) {
    const char* r = f.key().raw();
    const char* p = r;
    while (p < end_ && *p != '"' && *p != '\\') ++p;
    if (p < end_ && *p == '"') {
      *key = std::string_view(r, static_cast<size_t>(p - r));
      return true;
    }
    return !Err(f.unescaped_key().get(*key));
  }

  bool Type(od::value& v, JT* t) { return !Err(v.type().get(*t)); }
  // Consumes a null (validating the literal).
  bool Null(od::value& v) {
    bool is_null = false;
    return !Err(v.is_null().get(is_null));
  }

  bool Str(od::value& v, std::string_view key, std::string* dst) {
    JT t{};
    if (!Type(v, &t)) return false;
    if (t == JT::null) return dst->clear(), Null(v);
    if (t != JT::string) return st_.TypeError(key, "a string"), true;
    std::string_view s;
    if (Err(v.get_string().get(s))) return false;
    dst->assign(s);
    return true;
  }

  // An integer; *is_int false (and no error) when it is another kind of number.
  bool Integer(od::value& v, int64_t* out, bool* is_int) {
    od::number_type nt{};
    if (Err(v.get_number_type().get(nt))) return false;
    *is_int = false;
    if (nt == od::number_type::signed_integer) {
      if (Err(v.get_int64().get(*out))) return false;
      *is_int = true;
    } else if (nt == od::number_type::unsigned_integer) {
      uint64_t u = 0;
      if (Err(v.get_uint64().get(u))) return false;
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) *out = static_cast<int64_t>(u), *is_int = true;
    } else {
      double d;
      if (Err(v.get_double().get(d))) return false;
    }
    return true;
  }

  bool Int(od::value& v, std::string_view key, int64_t* dst, bool null_ok = true) {
    JT t{};
    if (!Type(v, &t)) return false;
    if (t == JT::null && null_ok) return Null(v);
    if (t != JT::number) return st_.TypeError(key, "an integer"), true;
    int64_t x = 0;
    bool is_int = false;
    if (!Integer(v, &x, &is_int)) return false;
    if (!is_int) return st_.TypeError(key, "an integer"), true;
    *dst = x;
    return true;
  }

  bool Int32(od::value& v, std::string_view key, int32_t* dst, bool null_ok = false) {
    JT t{};
    if (!Type(v, &t)) return false;
    if (t == JT::null && null_ok) return Null(v);
    int64_t x = 0;
    bool is_int = false;
    if (t != JT::number) return st_.TypeError(key, "an integer"), true;
    if (!Integer(v, &x, &is_int)) return false;
    if (!is_int) return st_.TypeError(key, "an integer"), true;
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
      return st_.TypeError(key, "a 32-bit integer"), true;
    *dst = static_cast<int32_t>(x);
    return true;
  }

  bool Bool(od::value& v, std::string_view key, bool* dst) {
    JT t{};
    if (!Type(v, &t)) return false;
    if (t == JT::null) return Null(v);
    if (t != JT::boolean) return st_.TypeError(key, "true or false"), true;
    return !Err(v.get_bool().get(*dst));
  }

  // Walks an array whose elements must be objects; each object goes to on_object.
  template <typename OnObject>
  bool Objects(od::value& v, std::string_view key, OnObject on_object) {
    od::array arr;
    if (Err(v.get_array().get(arr))) return false;
    for (auto item : arr) {
      od::value e;
      JT t{};
      if (Err(std::move(item).get(e)) || !Type(e, &t)) return false;
      if (t == JT::array) {
        st_.TypeError("an array element", "an object, not an array");
      } else if (t != JT::object) {
        st_.TypeError(key, "objects");
      } else if (!on_object(e)) {
        return false;
      }
    }
    return true;
  }

  // Calls on_field(key, value) for each field of an object value.
  template <typename OnField>
  bool Fields(od::value& v, OnField on_field) {
    od::object obj;
    if (Err(v.get_object().get(obj))) return false;
    for (auto item : obj) {
      od::field f;
      std::string_view key;
      if (Err(std::move(item).get(f)) || !Key(f, &key)) return false;
      if (!on_field(key, f.value())) return false;
    }
    return true;
  }

  // For a field that must be an array (or null): 1 array, 0 null or wrong type (reported), -1 error.
  int ArrayOrNull(od::value& v, std::string_view key) {
    JT t{};
    if (!Type(v, &t)) return -1;
    if (t == JT::array) return 1;
    if (t == JT::null) return Null(v) ? 0 : -1;
    st_.TypeError(key, "an array");
    return 0;
  }

  bool RootField(std::string_view key, od::value& v) {
    if (key == "format") return st_.saw_format = true, Str(v, key, &st_.format);
    if (key == "version") {
      st_.saw_version = true;
      JT t{};
      int64_t x = 0;
      bool is_int = false;
      if (!Type(v, &t)) return false;
      if (t != JT::number || !Integer(v, &x, &is_int) || !is_int || x > 1000000 || x < -1000000)
        return Syntax("\"version\" is not a small integer");
      out_->version = static_cast<int>(x);
      return true;
    }
    if (key == "rank") return st_.saw_rank = true, Int32(v, key, &out_->rank);
    if (key == "world_size") return st_.saw_world = true, Int32(v, key, &out_->world_size);
    if (key == "local_rank") return Int32(v, key, &out_->local_rank, true);
    if (key == "host") return Str(v, key, &out_->host);
    if (key == "pid") return Int(v, key, &out_->pid);
    if (key == "reason") return Str(v, key, &out_->reason);
    if (key == "time") return Str(v, key, &out_->time);
    if (key == "symbolized") return Bool(v, key, &out_->symbolized);
    if (key == "trigger") return Str(v, key, &out_->trigger);
    if (key == "process_state") {
      JT t{};
      if (!Type(v, &t)) return false;
      if (t == JT::null) return Null(v);
      if (t != JT::object) return st_.TypeError(key, "an object"), true;
      return Fields(v, [&](std::string_view k, od::value& fv) {
        if (k == "code") return Str(fv, k, &out_->process_state_code);
        if (k == "name") return Str(fv, k, &out_->process_state_name);
        return true;
      });
    }
    if (key == "inflight_ops") {
      int a = ArrayOrNull(v, key);
      if (a <= 0) return a == 0;
      size_t used = 0;
      bool ok = Objects(v, key, [&](od::value& ov) {
        InflightOp& o = NextElement(out_->inflight_ops, &used, [](InflightOp& x) { x = InflightOp(); });
        return Op(ov, o);
      });
      out_->inflight_ops.resize(used);
      return ok;
    }
    if (key == "threads") {
      int a = ArrayOrNull(v, key);
      if (a <= 0) return a == 0;
      st_.saw_threads = true;
      size_t used = 0;
      bool ok = Objects(v, key, [&](od::value& tv) { return Thread(tv, NextElement(out_->threads, &used, ResetThread)); });
      out_->threads.resize(used);
      return ok;
    }
    return true;  // unknown: skipped by the parser
  }

  bool Op(od::value& v, InflightOp& o) {
    return Fields(v, [&](std::string_view k, od::value& fv) {
      if (k == "name") return Str(fv, k, &o.name);
      if (k == "kind") return Str(fv, k, &o.kind);
      if (k == "stream") return Str(fv, k, &o.stream);
      if (k == "comm") return Str(fv, k, &o.comm);
      if (k == "state") return Str(fv, k, &o.state);
      if (k == "comm_rank") return Int(fv, k, &o.comm_rank);
      if (k == "comm_size") return Int(fv, k, &o.comm_size);
      if (k == "seq") return Int(fv, k, &o.seq);
      if (k == "peer") return Int(fv, k, &o.peer);
      if (k == "bytes") return Int(fv, k, &o.bytes);
      if (k == "blocked_by") return Int(fv, k, &o.blocked_by);
      if (k == "in_flight_s") {
        JT t{};
        if (!Type(fv, &t)) return false;
        if (t == JT::null) return Null(fv);
        if (t != JT::number) return st_.TypeError(k, "a number"), true;
        return !Err(fv.get_double().get(o.in_flight_s));
      }
      return true;
    });
  }

  bool Thread(od::value& v, StackThread& th) {
    size_t native_used = 0, python_used = 0;
    bool ok = Fields(v, [&](std::string_view k, od::value& fv) {
      if (k == "tid") return Int(fv, k, &th.tid);
      if (k == "name") return Str(fv, k, &th.name);
      if (k == "state") return Str(fv, k, &th.state);
      if (k == "main") return Bool(fv, k, &th.main);
      if (k == "holds_gil") {
        JT t{};
        if (!Type(fv, &t)) return false;
        if (t == JT::null) return th.holds_gil.reset(), Null(fv);
        if (t != JT::boolean) return st_.TypeError(k, "true, false or null"), true;
        bool b = false;
        if (Err(fv.get_bool().get(b))) return false;
        th.holds_gil = b;
        return true;
      }
      if (k == "native") {
        native_used = 0;
        int a = ArrayOrNull(fv, k);
        if (a <= 0) return a == 0;
        return Objects(fv, k, [&](od::value& f) {
          NativeFrame& n = NextElement(th.native, &native_used, ResetNative);
          return Fields(f, [&](std::string_view fk, od::value& x) {
            if (fk == "function") return Str(x, fk, &n.function);
            if (fk == "module") return Str(x, fk, &n.module);
            if (fk == "offset") return Str(x, fk, &n.offset);
            if (fk == "file") return Str(x, fk, &n.file);
            if (fk == "line") return Int(x, fk, &n.line);
            if (fk == "inlined") return Bool(x, fk, &n.inlined);
            return true;
          });
        });
      }
      if (k == "python") {
        python_used = 0;
        int a = ArrayOrNull(fv, k);
        if (a <= 0) return a == 0;
        return Objects(fv, k, [&](od::value& f) {
          PythonFrame& p = NextElement(th.python, &python_used, ResetPython);
          return Fields(f, [&](std::string_view fk, od::value& x) {
            if (fk == "function") return Str(x, fk, &p.function);
            if (fk == "file") return Str(x, fk, &p.file);
            if (fk == "line") return Int(x, fk, &p.line);
            return true;
          });
        });
      }
      return true;
    });
    th.native.resize(native_used);
    th.python.resize(python_used);
    return ok;
  }

  StackFile* out_;
  ParseState& st_;
  const char* end_;  // one past the document (the padding follows)
};

}  // namespace

bool HaveSimdjson() { return true; }

bool ParseWithSimdjson(const char* data, size_t size, StackFile* out, std::string* error) {
  // One parser per thread: its buffers grow to the largest file and are reused.
  thread_local od::parser parser;
  ParseState st;
  Reader reader(out, st, data + size);
  od::document doc;
  auto e = parser.iterate(simdjson::padded_string_view(data, size, size + kPadding)).get(doc);
  if (e != simdjson::SUCCESS) {
    st.syntax_error = std::string("not valid JSON: ") + simdjson::error_message(e);
  } else {
    reader.Document(doc);
  }
  return FinishParse(st, *out, error);
}

}  // namespace xtimer::stack_reader
