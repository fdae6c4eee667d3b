// The stack reader's parser (simdjson): walks the document once and fills StackFile in place.
// The tests' reference reader (tests/viewer/reference_stack_reader.cc, nlohmann-json) follows the
// same field and type rules; the tests run both on the same inputs and the fuzz corpus compares them.
//
// Two of simdjson's APIs feed one Reader (the field and type rules are written once, over a small
// adapter per API):
// - DOM (dom::parser) parses with the implementation simdjson picks at run time for this CPU
//   (haswell on any AVX2 machine), then the Reader walks the parsed tape. Every well-formed file
//   takes this path.
// - On-Demand reads only what DOM refuses (not valid JSON, nested deeper than 1024 levels, or over
//   kDomMaxBytes). Debian's simdjson 3.0.1 has On-Demand only for the implementation chosen at
//   compile time, `fallback` at baseline x86-64 flags (the tools are built without -mavx2 or
//   -march so that they run on any x86-64): it read stack files at about half DOM's rate. Keeping
//   it for what DOM refuses keeps every verdict the reader gave before: a damaged file gets the
//   same reason (On-Demand stops at the first fault in reading order, DOM reports its own), and a
//   file whose unknown fields hold malformed values stays accepted (On-Demand does not validate
//   the values it skips).
#include <simdjson.h>

#include <cstring>
#include <limits>
#include <utility>

#include "common/stacks/stack_reader_impl.h"

namespace xtimer::stack_reader {
namespace {

static_assert(kPadding >= simdjson::SIMDJSON_PADDING, "the read buffers must carry simdjson's padding");

namespace od = simdjson::ondemand;
namespace dom = simdjson::dom;
using simdjson::error_code;
using simdjson::SUCCESS;

// Larger documents are left to On-Demand: DOM's tape takes 8 bytes per JSON token (up to 8x the
// file for a hostile one), On-Demand 4. A stack file of 64 threads x 48 symbolised frames is 0.7 MB.
constexpr size_t kDomMaxBytes = size_t{16} << 20;

enum class Kind { kObject, kArray, kString, kNumber, kBool, kNull };

// key == literal, with the length known at compile time so that the comparison is inlined
// (string_view's == calls memcmp: a tenth of the walk when every key was compared that way).
template <size_t N>
inline bool Is(std::string_view key, const char (&literal)[N]) {
  return key.size() == N - 1 && std::memcmp(key.data(), literal, N - 1) == 0;
}

// DOM: the document is valid JSON once parsed, so only the type checks below can fail.
class DomApi {
 public:
  using Value = dom::element;

  error_code Type(Value& v, Kind* k) {
    switch (v.type()) {
      case dom::element_type::OBJECT: *k = Kind::kObject; break;
      case dom::element_type::ARRAY: *k = Kind::kArray; break;
      case dom::element_type::STRING: *k = Kind::kString; break;
      case dom::element_type::INT64:
      case dom::element_type::UINT64:
      case dom::element_type::DOUBLE: *k = Kind::kNumber; break;
      case dom::element_type::BOOL: *k = Kind::kBool; break;
      case dom::element_type::NULL_VALUE: *k = Kind::kNull; break;
    }
    return SUCCESS;
  }
  error_code Null(Value&) { return SUCCESS; }
  error_code String(Value& v, std::string_view* s) { return v.get_string().get(*s); }
  error_code Bool(Value& v, bool* b) { return v.get_bool().get(*b); }
  error_code Double(Value& v, double* d) { return v.get_double().get(*d); }
  // An integer; *is_int false when it is another kind of number. DOM stores integers of
  // [-2^63, 2^63) as INT64 and [2^63, 2^64) as UINT64, as On-Demand classifies them.
  error_code Integer(Value& v, int64_t* out, bool* is_int) {
    *is_int = v.type() == dom::element_type::INT64;
    return *is_int ? v.get_int64().get(*out) : SUCCESS;
  }

  template <typename Reader, typename OnField>
  bool Fields(Reader& r, Value& v, OnField&& on_field) {
    dom::object obj;
    if (r.Err(v.get_object().get(obj))) return false;
    for (dom::key_value_pair kv : obj)
      if (!on_field(kv.key, kv.value)) return false;
    return true;
  }
  template <typename Reader, typename OnElement>
  bool Elements(Reader& r, Value& v, OnElement&& on_element) {
    dom::array arr;
    if (r.Err(v.get_array().get(arr))) return false;
    for (dom::element e : arr)
      if (!on_element(e)) return false;
    return true;
  }
};

// On-Demand: values are read (and validated) as the walk reaches them, each once.
class OnDemandApi {
 public:
  using Value = od::value;

  explicit OnDemandApi(const char* end) : end_(end) {}

  error_code Type(Value& v, Kind* k) {
    od::json_type t{};
    if (error_code e = v.type().get(t)) return e;
    switch (t) {
      case od::json_type::object: *k = Kind::kObject; break;
      case od::json_type::array: *k = Kind::kArray; break;
      case od::json_type::string: *k = Kind::kString; break;
      case od::json_type::number: *k = Kind::kNumber; break;
      case od::json_type::boolean: *k = Kind::kBool; break;
      case od::json_type::null: *k = Kind::kNull; break;
    }
    return SUCCESS;
  }
  // Consumes a null (validating the literal).
  error_code Null(Value& v) {
    bool is_null = false;
    return v.is_null().get(is_null);
  }
  error_code String(Value& v, std::string_view* s) { return v.get_string().get(*s); }
  error_code Bool(Value& v, bool* b) { return v.get_bool().get(*b); }
  error_code Double(Value& v, double* d) { return v.get_double().get(*d); }
  error_code Integer(Value& v, int64_t* out, bool* is_int) {
    od::number_type nt{};
    *is_int = false;
    if (error_code e = v.get_number_type().get(nt)) return e;
    if (nt == od::number_type::signed_integer) {
      if (error_code e = v.get_int64().get(*out)) return e;
      *is_int = true;
    } else if (nt == od::number_type::unsigned_integer) {
      uint64_t u = 0;
      if (error_code e = v.get_uint64().get(u)) return e;
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        *out = static_cast<int64_t>(u), *is_int = true;
    } else {
      double d;
      if (error_code e = v.get_double().get(d)) return e;
    }
    return SUCCESS;
  }

  template <typename Reader, typename OnField>
  bool Fields(Reader& r, Value& v, OnField&& on_field) {
    od::object obj;
    if (r.Err(v.get_object().get(obj))) return false;
    return FieldsOf(r, obj, on_field);
  }
  template <typename Reader, typename OnField>
  bool FieldsOf(Reader& r, od::object& obj, OnField&& on_field) {
    for (auto item : obj) {
      od::field f;
      std::string_view key;
      if (r.Err(std::move(item).get(f)) || r.Err(Key(f, &key))) return false;
      if (!on_field(key, f.value())) return false;
    }
    return true;
  }
  template <typename Reader, typename OnElement>
  bool Elements(Reader& r, Value& v, OnElement&& on_element) {
    od::array arr;
    if (r.Err(v.get_array().get(arr))) return false;
    for (auto item : arr) {
      od::value e;
      if (r.Err(std::move(item).get(e)) || !on_element(e)) return false;
    }
    return true;
  }

 private:
  // A field's key. Keys without an escape (all keys a writer of this format produces) are read in
  // place between their quotes; unescaping every key into simdjson's string buffer was a third of
  // the walk. A key with a backslash is unescaped, so "\u0072ank" still reads as "rank".
  error_code Key(od::field& f, std::string_view* key) {
    const char* r = f.key().raw();
    const char* p = r;
    while (p < end_ && *p != '"' && *p != '\\') ++p;
    if (p < end_ && *p == '"') {
      *key = std::string_view(r, static_cast<size_t>(p - r));
      return SUCCESS;
    }
    return f.unescaped_key().get(*key);
  }

  const char* end_;  // one past the document (the padding follows)
};

template <typename Api>
class Reader {
 public:
  using Value = typename Api::Value;

  // out: the file whose header the root fills; nullptr when reading one thread (ThreadDocument).
  Reader(StackFile* out, ParseState& st, Api api) : out_(out), st_(st), api_(std::move(api)) {
    if (out != nullptr) ResetHeader(out);
  }

  // The root, parsed by DOM.
  void Document(dom::element root) {
    if (root.type() != dom::element_type::OBJECT) return;  // saw_root stays false: "not a JSON object"
    st_.saw_root = true;
    api_.Fields(*this, root, [&](std::string_view key, Value& v) { return RootField(key, v); });
  }

  // The root, iterated by On-Demand.
  void Document(od::document& doc) {
    od::json_type t{};
    if (Err(doc.type().get(t))) return;
    if (t != od::json_type::object) return;  // saw_root stays false: "not a JSON object"
    od::object root;
    if (Err(doc.get_object().get(root))) return;
    st_.saw_root = true;
    if (!api_.FieldsOf(*this, root, [&](std::string_view key, Value& v) { return RootField(key, v); })) return;
    // At the end, the location is out of bounds; anything else is content after the object.
    const char* rest = nullptr;
    if (doc.current_location().get(rest) == SUCCESS) Syntax("not valid JSON: content after the object");
  }

  // One element of "threads" as a document of its own (stack_file_threads.h), parsed by DOM.
  void ThreadDocument(dom::element root, StackThread* th) {
    if (root.type() != dom::element_type::OBJECT) return Syntax("a thread is not an object"), void();
    ResetThread(*th);
    Thread(root, *th);
  }

  // The same, iterated by On-Demand.
  void ThreadDocument(od::document& doc, StackThread* th) {
    ResetThread(*th);
    od::value v;  // Thread() takes a value: an object or array document gives one
    if (Err(doc.get_value().get(v))) return;
    if (!Thread(v, *th)) return;
    const char* rest = nullptr;
    if (doc.current_location().get(rest) == SUCCESS) Syntax("not valid JSON: content after the object");
  }

  // True (and the first error remembered) when e is an error.
  bool Err(error_code e) {
    if (e == SUCCESS) [[likely]]
      return false;
    return Error(e);
  }

 private:
  [[gnu::noinline, gnu::cold]] bool Error(error_code e) {
    if (st_.syntax_error.empty()) st_.syntax_error = std::string("not valid JSON: ") + simdjson::error_message(e);
    return true;
  }

  bool Syntax(std::string msg) {
    if (st_.syntax_error.empty()) st_.syntax_error = std::move(msg);
    return false;
  }

  [[gnu::always_inline]] bool Type(Value& v, Kind* t) { return !Err(api_.Type(v, t)); }
  [[gnu::always_inline]] bool Null(Value& v) { return !Err(api_.Null(v)); }

  [[gnu::always_inline]] bool Str(Value& v, std::string_view key, std::string* dst) {
    Kind t{};
    if (!Type(v, &t)) return false;
    if (t == Kind::kNull) return dst->clear(), Null(v);
    if (t != Kind::kString) return st_.TypeError(key, "a string"), true;
    std::string_view s;
    if (Err(api_.String(v, &s))) return false;
    if (s.size() == dst->size() && s.size() <= kMaxStackStringBytes) {
      // A reused frame's string: overwrite, no allocator or resize.
      if (!s.empty()) std::memcpy(dst->data(), s.data(), s.size());
    } else {
      AssignCapped(s, dst);
    }
    return true;
  }

  // An integer; *is_int false (and no error) when it is another kind of number.
  [[gnu::always_inline]] bool Integer(Value& v, int64_t* out, bool* is_int) {
    return !Err(api_.Integer(v, out, is_int));
  }

  [[gnu::always_inline]] bool Int(Value& v, std::string_view key, int64_t* dst, bool null_ok = true) {
    Kind t{};
    if (!Type(v, &t)) return false;
    if (t == Kind::kNull && null_ok) return Null(v);
    if (t != Kind::kNumber) return st_.TypeError(key, "an integer"), true;
    int64_t x = 0;
    bool is_int = false;
    if (!Integer(v, &x, &is_int)) return false;
    if (!is_int) return st_.TypeError(key, "an integer"), true;
    *dst = x;
    return true;
  }

  bool Int32(Value& v, std::string_view key, int32_t* dst, bool null_ok = false) {
    Kind t{};
    if (!Type(v, &t)) return false;
    if (t == Kind::kNull && null_ok) return Null(v);
    int64_t x = 0;
    bool is_int = false;
    if (t != Kind::kNumber) return st_.TypeError(key, "an integer"), true;
    if (!Integer(v, &x, &is_int)) return false;
    if (!is_int) return st_.TypeError(key, "an integer"), true;
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
      return st_.TypeError(key, "a 32-bit integer"), true;
    *dst = static_cast<int32_t>(x);
    return true;
  }

  [[gnu::always_inline]] bool Bool(Value& v, std::string_view key, bool* dst) {
    Kind t{};
    if (!Type(v, &t)) return false;
    if (t == Kind::kNull) return Null(v);
    if (t != Kind::kBool) return st_.TypeError(key, "true or false"), true;
    return !Err(api_.Bool(v, dst));
  }

  // Walks an array whose elements must be objects; each object goes to on_object.
  template <typename OnObject>
  bool Objects(Value& v, std::string_view key, OnObject on_object) {
    return api_.Elements(*this, v, [&](Value& e) {
      Kind t{};
      if (!Type(e, &t)) return false;
      if (t == Kind::kArray) {
        st_.TypeError("an array element", "an object, not an array");
      } else if (t != Kind::kObject) {
        st_.TypeError(key, "objects");
      } else if (!on_object(e)) {
        return false;
      }
      return true;
    });
  }

  // Calls on_field(key, value) for each field of an object value.
  template <typename OnField>
  bool Fields(Value& v, OnField on_field) {
    return api_.Fields(*this, v, on_field);
  }

  // For a field that must be an array (or null): 1 array, 0 null or wrong type (reported), -1 error.
  int ArrayOrNull(Value& v, std::string_view key) {
    Kind t{};
    if (!Type(v, &t)) return -1;
    if (t == Kind::kArray) return 1;
    if (t == Kind::kNull) return Null(v) ? 0 : -1;
    st_.TypeError(key, "an array");
    return 0;
  }

  bool RootField(std::string_view key, Value& v) {
    if (Is(key, "format")) return st_.saw_format = true, Str(v, key, &st_.format);
    if (Is(key, "version")) {
      st_.saw_version = true;
      Kind t{};
      int64_t x = 0;
      bool is_int = false;
      if (!Type(v, &t)) return false;
      if (t != Kind::kNumber || !Integer(v, &x, &is_int) || !is_int || x > 1000000 || x < -1000000)
        return Syntax("\"version\" is not a small integer");
      out_->version = static_cast<int>(x);
      return true;
    }
    if (Is(key, "rank")) return st_.saw_rank = true, Int32(v, key, &out_->rank);
    if (Is(key, "world_size")) return st_.saw_world = true, Int32(v, key, &out_->world_size);
    if (Is(key, "local_rank")) return Int32(v, key, &out_->local_rank, true);
    if (Is(key, "host")) return Str(v, key, &out_->host);
    if (Is(key, "pid")) return Int(v, key, &out_->pid);
    if (Is(key, "reason")) return Str(v, key, &out_->reason);
    if (Is(key, "time")) return Str(v, key, &out_->time);
    if (Is(key, "symbolized")) return Bool(v, key, &out_->symbolized);
    if (Is(key, "trigger")) return Str(v, key, &out_->trigger);
    if (Is(key, "process_state")) {
      Kind t{};
      if (!Type(v, &t)) return false;
      if (t == Kind::kNull) return Null(v);
      if (t != Kind::kObject) return st_.TypeError(key, "an object"), true;
      return Fields(v, [&](std::string_view k, Value& fv) {
        if (Is(k, "code")) return Str(fv, k, &out_->process_state_code);
        if (Is(k, "name")) return Str(fv, k, &out_->process_state_name);
        return true;
      });
    }
    if (Is(key, "inflight_ops")) {
      int a = ArrayOrNull(v, key);
      if (a <= 0) return a == 0;
      size_t used = 0;
      bool ok = Objects(v, key, [&](Value& ov) {
        InflightOp& o = NextElement(out_->inflight_ops, &used, [](InflightOp& x) { x = InflightOp(); });
        return Op(ov, o);
      });
      out_->inflight_ops.resize(used);
      return ok;
    }
    if (Is(key, "threads")) {
      int a = ArrayOrNull(v, key);
      if (a <= 0) return a == 0;
      st_.saw_threads = true;
      size_t used = 0;
      bool ok = Objects(v, key, [&](Value& tv) { return Thread(tv, NextElement(out_->threads, &used, ResetThread)); });
      out_->threads.resize(used);
      return ok;
    }
    return true;  // unknown: skipped
  }

  bool Op(Value& v, InflightOp& o) {
    return Fields(v, [&](std::string_view k, Value& fv) {
      if (Is(k, "name")) return Str(fv, k, &o.name);
      if (Is(k, "kind")) return Str(fv, k, &o.kind);
      if (Is(k, "stream")) return Str(fv, k, &o.stream);
      if (Is(k, "comm")) return Str(fv, k, &o.comm);
      if (Is(k, "state")) return Str(fv, k, &o.state);
      if (Is(k, "comm_rank")) return Int(fv, k, &o.comm_rank);
      if (Is(k, "comm_size")) return Int(fv, k, &o.comm_size);
      if (Is(k, "seq")) return Int(fv, k, &o.seq);
      if (Is(k, "peer")) return Int(fv, k, &o.peer);
      if (Is(k, "bytes")) return Int(fv, k, &o.bytes);
      if (Is(k, "blocked_by")) return Int(fv, k, &o.blocked_by);
      if (Is(k, "in_flight_s")) {
        Kind t{};
        if (!Type(fv, &t)) return false;
        if (t == Kind::kNull) return Null(fv);
        if (t != Kind::kNumber) return st_.TypeError(k, "a number"), true;
        return !Err(api_.Double(fv, &o.in_flight_s));
      }
      return true;
    });
  }

  bool Thread(Value& v, StackThread& th) {
    size_t native_used = 0, python_used = 0;
    bool ok = Fields(v, [&](std::string_view k, Value& fv) {
      if (Is(k, "tid")) return Int(fv, k, &th.tid);
      if (Is(k, "name")) return Str(fv, k, &th.name);
      if (Is(k, "python_name")) return Str(fv, k, &th.python_name);
      if (Is(k, "state")) return Str(fv, k, &th.state);
      if (Is(k, "main")) return Bool(fv, k, &th.main);
      if (Is(k, "holds_gil")) {
        Kind t{};
        if (!Type(fv, &t)) return false;
        if (t == Kind::kNull) return th.holds_gil.reset(), Null(fv);
        if (t != Kind::kBool) return st_.TypeError(k, "true, false or null"), true;
        bool b = false;
        if (Err(api_.Bool(fv, &b))) return false;
        th.holds_gil = b;
        return true;
      }
      if (Is(k, "native")) {
        native_used = 0;
        int a = ArrayOrNull(fv, k);
        if (a <= 0) return a == 0;
        return Objects(fv, k, [&](Value& f) {
          // The frame is the previous file's at this place, mostly with strings of the same
          // lengths: they are overwritten in place (see Str), and those this frame lacks cleared.
          NativeFrame& n = NextElement(th.native, &native_used, [](NativeFrame& x) { x.line = 0, x.inlined = false; });
          unsigned met = 0;
          bool ok = Fields(f, [&](std::string_view fk, Value& x) {
            if (Is(fk, "function")) return met |= 1, Str(x, fk, &n.function);
            if (Is(fk, "module")) return met |= 2, Str(x, fk, &n.module);
            if (Is(fk, "offset")) return met |= 4, Str(x, fk, &n.offset);
            if (Is(fk, "file")) return met |= 8, Str(x, fk, &n.file);
            if (Is(fk, "line")) return Int(x, fk, &n.line);
            if (Is(fk, "inlined")) return Bool(x, fk, &n.inlined);
            return true;
          });
          if (met != 15) {
            if (!(met & 1)) n.function.clear();
            if (!(met & 2)) n.module.clear();
            if (!(met & 4)) n.offset.clear();
            if (!(met & 8)) n.file.clear();
          }
          return ok;
        });
      }
      if (Is(k, "python")) {
        python_used = 0;
        int a = ArrayOrNull(fv, k);
        if (a <= 0) return a == 0;
        return Objects(fv, k, [&](Value& f) {
          PythonFrame& p = NextElement(th.python, &python_used, [](PythonFrame& x) { x.line = 0; });
          unsigned met = 0;
          bool ok = Fields(f, [&](std::string_view fk, Value& x) {
            if (Is(fk, "function")) return met |= 1, Str(x, fk, &p.function);
            if (Is(fk, "file")) return met |= 2, Str(x, fk, &p.file);
            if (Is(fk, "line")) return Int(x, fk, &p.line);
            return true;
          });
          if (!(met & 1)) p.function.clear();
          if (!(met & 2)) p.file.clear();
          return ok;
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
  Api api_;
};

// One DOM parser per thread for documents up to kDomMaxBytes: its buffers are reused.
dom::parser& ThreadDomParser() {
  thread_local dom::parser parser(kDomMaxBytes);
  return parser;
}

}  // namespace

bool ParseWithSimdjson(const char* data, size_t size, StackFile* out, std::string* error) {
  dom::parser& dom_parser = ThreadDomParser();
  ParseState st;
  dom::element root;
  // data is padded (kPadding): DOM parses it where it lies, no copy.
  if (dom_parser.parse(data, size, false).get(root) == SUCCESS) {
    Reader<DomApi> reader(out, st, DomApi());
    reader.Document(root);
    return FinishParse(st, *out, error);
  }
  // Larger files: a parser for this file alone. Its index is several times the file (about 5x:
  // 530 MB for a 95 MB file) and a thread_local one kept it through the whole merge that follows.
  od::parser od_parser;
  Reader<OnDemandApi> reader(out, st, OnDemandApi(data + size));
  od::document doc;
  auto e = od_parser.iterate(simdjson::padded_string_view(data, size, size + kPadding)).get(doc);
  if (e != SUCCESS) {
    st.syntax_error = std::string("not valid JSON: ") + simdjson::error_message(e);
  } else {
    reader.Document(doc);
  }
  return FinishParse(st, *out, error);
}

bool ParseThreadWithSimdjson(const char* data, size_t size, StackThread* out, std::string* error) {
  dom::parser& dom_parser = ThreadDomParser();
  ParseState st;
  dom::element root;
  if (dom_parser.parse(data, size, false).get(root) == SUCCESS) {
    Reader<DomApi> reader(nullptr, st, DomApi());
    reader.ThreadDocument(root, out);
  } else {
    // Not valid JSON, or a thread over kDomMaxBytes: On-Demand reads it or names the fault.
    od::parser od_parser;
    Reader<OnDemandApi> reader(nullptr, st, OnDemandApi(data + size));
    od::document doc;
    auto e = od_parser.iterate(simdjson::padded_string_view(data, size, size + kPadding)).get(doc);
    if (e != SUCCESS) st.syntax_error = std::string("not valid JSON: ") + simdjson::error_message(e);
    else reader.ThreadDocument(doc, out);
  }
  if (!st.syntax_error.empty()) return *error = st.syntax_error, false;
  if (!st.type_error.empty()) return *error = st.type_error, false;
  return true;
}

}  // namespace xtimer::stack_reader
