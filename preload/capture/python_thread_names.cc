#include "preload/capture/python_thread_names.h"

#include "preload/capture/fault_guard.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

// CPython layouts used here, x86-64 and aarch64, GIL builds (offsets checked with offsetof against
// each version's own headers, internal ones included, and end to end by tests/capture):
//   PyObject:        ob_type at 8.
//   PyTypeObject:    tp_basicsize 32, tp_flags 168, tp_dictoffset 288 (3.7-3.13).
//   PyModuleObject:  md_dict at 16.
//   PyDictObject:    ma_keys 32, ma_values 40 (a split table's values: PyObject*[] up to 3.12,
//                    after 8 bytes of header in 3.13).
//   PyDictKeysObject 3.7-3.10: dk_size 8, dk_nentries 32, indices at 40 (1/2/4/8 bytes each by
//                    size), then entries {hash, key, value}.
//                    3.11-3.13: dk_log2_size 8, dk_log2_index_bytes 9, dk_kind 10, dk_nentries 24,
//                    indices at 32, then entries {hash, key, value} (kind 0) or {key, value}.
//   str:             length 16, state 32 (kind bits 2-4, compact bit 5, ascii bit 6); compact data
//                    after PyASCIIObject (48 bytes up to 3.11, 40 after) when ascii, else after
//                    PyCompactUnicodeObject (72 / 56).
//   int:             3.7-3.11 ob_size at 16 (signed digit count); 3.12+ lv_tag at 16 (digits << 3,
//                    sign in the low 2 bits, 2 = negative); 30-bit digits from 24.
//   Instance attributes: 3.7-3.10 a dict at tp_dictoffset. 3.11+ with Py_TPFLAGS_MANAGED_DICT
//                    (1 << 4): 3.11 dict pointer at obj-24, values pointer at obj-32; 3.12 one word
//                    at obj-24, values when its low bit is set (stored as pointer - 1); 3.13 dict at
//                    obj-24, and with Py_TPFLAGS_INLINE_VALUES (1 << 2) values inline at obj +
//                    tp_basicsize, used while their `valid` byte (offset 3) is set. Values are
//                    indexed like the entries of the type's shared keys (ht_cached_keys).
//   sys.modules:     PyInterpreterState.modules (3.7-3.11) / .imports.modules (3.12-3.13); the
//                    offset below is a first guess, checked, and the state is scanned if wrong.

namespace xtimer::capture {

namespace {

constexpr size_t kObType = 8;
constexpr size_t kTpBasicsize = 32, kTpFlags = 168, kTpDictoffset = 288;
constexpr size_t kMdDict = 16;
constexpr size_t kMaKeys = 32, kMaValues = 40;
constexpr uint64_t kManagedDict = 1u << 4, kInlineValues = 1u << 2;
constexpr size_t kMaxModules = 1 << 20;  // entries of sys.modules looked at, at most
constexpr size_t kMaxThreads = 1 << 16;  // entries of threading._active, at most
constexpr size_t kScanBytes = 16384;     // of PyInterpreterState, for sys.modules
constexpr size_t kEntryChunk = 256;      // dict entries per read

void AppendUtf8(uint32_t c, std::string* out) {
  if (c >= 0xd800 && c <= 0xdfff) c = '?';  // a lone surrogate is not UTF-8
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x110000) {
    out->push_back(static_cast<char>(0xf0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out->push_back('?');
  }
}

template <typename T>
T Load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

// One read of the names, every read of the process's memory through the fault guard.
class NameReader {
 public:
  NameReader(PythonThreadNames* n, FaultGuard* guard) : n_(*n), l_(n->layout_), guard_(*guard) {}

  bool Read(void* out, uintptr_t addr, size_t size) { return guard_.Copy(out, addr, size); }
  bool Word(uintptr_t addr, uintptr_t* out) { return Read(out, addr, sizeof *out); }
  bool TypeIs(uintptr_t obj, uintptr_t type) {
    uintptr_t t = 0;
    return Word(obj + kObType, &t) && t == type;
  }

  // A str object's text as UTF-8, at most `max_chars` characters (more: cut, "..." appended).
  bool Str(uintptr_t obj, size_t max_chars, std::string* out) {
    unsigned char head[96];
    // Header and, for short ASCII text, the text itself in one read (an object at the end of a
    // mapping: the header alone).
    size_t got = sizeof head;
    if (!Read(head, obj, got)) {
      got = l_.ascii_size;
      if (!Read(head, obj, got)) return false;
    }
    if (Load<uintptr_t>(head + kObType) != n_.str_type_) return false;
    const int64_t length = Load<int64_t>(head + 16);
    const uint32_t state = Load<uint32_t>(head + 32);
    const unsigned kind = (state >> 2) & 7;
    const bool compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || length < 0 || (kind != 1 && kind != 2 && kind != 4)) return false;
    const size_t n = std::min<size_t>(static_cast<size_t>(length), max_chars);
    const size_t data = ascii ? l_.ascii_size : l_.compact_size;
    std::vector<unsigned char> buf(n * kind);
    if (data + buf.size() <= got) {
      std::memcpy(buf.data(), head + data, buf.size());
    } else if (!buf.empty() && !Read(buf.data(), obj + data, buf.size())) {
      return false;
    }
    out->clear();
    for (size_t i = 0; i < n; ++i) {
      uint32_t c = kind == 1 ? buf[i] : kind == 2 ? Load<uint16_t>(&buf[i * 2]) : Load<uint32_t>(&buf[i * 4]);
      AppendUtf8(c, out);
    }
    if (n < static_cast<size_t>(length)) *out += "...";
    return true;
  }
  bool StrIs(uintptr_t obj, std::string_view want) {
    std::string s;
    return Str(obj, want.size() + 1, &s) && s == want;
  }

  // An int as an unsigned 64-bit value (thread idents are pthread_t).
  bool Unsigned(uintptr_t obj, uint64_t* out) {
    unsigned char b[24 + 3 * 4];
    if (!Read(b, obj, 24) || Load<uintptr_t>(b + kObType) != n_.long_type_) return false;
    int64_t digits;
    if (l_.minor >= 12) {
      uint64_t tag = Load<uint64_t>(b + 16);
      if ((tag & 3) == 2) return false;  // negative
      digits = static_cast<int64_t>(tag >> 3);
    } else {
      digits = Load<int64_t>(b + 16);
      if (digits < 0) return false;
    }
    if (digits > 3) return false;  // over 90 bits
    if (digits > 0 && !Read(b + 24, obj + 24, static_cast<size_t>(digits) * 4)) return false;
    uint64_t v = 0;
    for (int64_t i = 0; i < digits; ++i) {
      uint64_t d = Load<uint32_t>(b + 24 + 4 * i) & 0x3fffffffu;
      if (i == 2 && d > 0xf) return false;  // over 64 bits
      v |= d << (30 * i);
    }
    *out = v;
    return true;
  }

  // Calls fn(index, key, value) for each entry of a dict (values of a split table included)
  // until it returns false. `first` is tried before the rest (the index of an earlier find).
  template <typename Fn>
  bool ForEach(uintptr_t dict, size_t limit, size_t first, Fn&& fn) {
    unsigned char d[48];
    if (!Read(d, dict, sizeof d) || Load<uintptr_t>(d + kObType) != n_.dict_type_) return false;
    const uintptr_t keys = Load<uintptr_t>(d + kMaKeys);
    uintptr_t values = Load<uintptr_t>(d + kMaValues);
    if (values != 0 && l_.minor >= 13) values += 8;
    return ForEachInKeys(keys, values, limit, first, fn);
  }

  // The same over a keys object; `values` is the split table's value array (0: in the entries).
  template <typename Fn>
  bool ForEachInKeys(uintptr_t keys, uintptr_t values, size_t limit, size_t first, Fn&& fn) {
    unsigned char k[40];
    if (!Read(k, keys, sizeof k)) return false;
    uint64_t nentries, entries;
    size_t esize = 24, key_at = 8;
    if (l_.minor >= 11) {
      const unsigned log2_size = k[8], log2_index_bytes = k[9], kind = k[10];
      if (log2_size > 40 || log2_index_bytes > 43 || kind > 2) return false;
      nentries = Load<uint64_t>(k + 24);
      entries = keys + 32 + (uint64_t{1} << log2_index_bytes);
      if (kind != 0) esize = 16, key_at = 0;
      if (nentries > (uint64_t{1} << log2_size)) return false;
    } else {
      const uint64_t size = Load<uint64_t>(k + 8);
      nentries = Load<uint64_t>(k + 32);
      if (size == 0 || size > (uint64_t{1} << 40) || nentries > size) return false;
      const uint64_t ix = size <= 0xff ? 1 : size <= 0xffff ? 2 : size <= 0xffffffffu ? 4 : 8;
      entries = keys + 40 + size * ix;
    }
    nentries = std::min<uint64_t>(nentries, limit);
    auto visit = [&](size_t i, const unsigned char* e, const uintptr_t* vals) -> int {
      uintptr_t key = Load<uintptr_t>(e + key_at);
      uintptr_t value = vals != nullptr ? vals[0] : Load<uintptr_t>(e + key_at + 8);
      if (key == 0 || value == 0) return 1;
      return fn(i, key, value) ? 1 : 0;
    };
    unsigned char one[24];
    uintptr_t val = 0;
    if (first < nentries && Read(one, entries + first * esize, esize) &&
        (values == 0 || Word(values + first * 8, &val))) {
      if (visit(first, one, values != 0 ? &val : nullptr) == 0) return true;
    }
    std::vector<unsigned char> chunk(kEntryChunk * esize);
    std::vector<uintptr_t> vals(values != 0 ? kEntryChunk : 0);
    for (uint64_t at = 0; at < nentries; at += kEntryChunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kEntryChunk, nentries - at));
      if (!Read(chunk.data(), entries + at * esize, n * esize)) return false;
      if (values != 0 && !Read(vals.data(), values + at * 8, n * 8)) return false;
      for (size_t j = 0; j < n; ++j) {
        if (at + j == first) continue;
        if (visit(at + j, &chunk[j * esize], values != 0 ? &vals[j] : nullptr) == 0) return true;
      }
    }
    return true;
  }

  // dict[name] for a str key; *index is where it was found. 0 when absent or unreadable.
  uintptr_t Lookup(uintptr_t dict, std::string_view name, size_t limit, size_t* index) {
    uintptr_t found = 0;
    ForEach(dict, limit, *index, [&](size_t i, uintptr_t key, uintptr_t value) {
      if (!StrIs(key, name)) return true;
      found = value;
      *index = i;
      return false;
    });
    return found;
  }

  // getattr(obj, name) for a plain instance attribute (no descriptors, no __getattr__).
  uintptr_t Attribute(uintptr_t obj, std::string_view name) {
    uintptr_t type = 0;
    if (!Word(obj + kObType, &type)) return 0;
    int64_t basicsize = 0, dictoffset = 0;
    uint64_t flags = 0;
    if (!Read(&basicsize, type + kTpBasicsize, 8) || !Read(&flags, type + kTpFlags, 8) ||
        !Read(&dictoffset, type + kTpDictoffset, 8))
      return 0;
    size_t index = 0;
    if (l_.minor < 11 || (flags & kManagedDict) == 0) {
      uintptr_t dict = 0;
      if (dictoffset <= 0 || !Word(obj + static_cast<uintptr_t>(dictoffset), &dict) || dict == 0) return 0;
      return Lookup(dict, name, 4096, &index);
    }
    uintptr_t word = 0, values = 0;
    if (!Word(obj - 24, &word)) return 0;
    if (l_.minor == 11) {
      if (word != 0) return Lookup(word, name, 4096, &index);
      if (!Word(obj - 32, &values) || values == 0) return 0;
    } else if (l_.minor == 12) {
      if ((word & 1) == 0) return word != 0 ? Lookup(word, name, 4096, &index) : 0;
      values = word + 1;  // stored as the pointer - 1
    } else {
      if (word != 0) return Lookup(word, name, 4096, &index);
      unsigned char valid = 0;
      if ((flags & kInlineValues) == 0 || basicsize <= 0) return 0;
      values = obj + static_cast<uintptr_t>(basicsize);
      if (!Read(&valid, values + 3, 1) || valid == 0) return 0;
      values += 8;
    }
    uintptr_t keys = 0;
    if (!Word(type + l_.ht_cached_keys, &keys) || keys == 0) return 0;
    uintptr_t found = 0;
    ForEachInKeys(keys, values, 4096, 0, [&](size_t, uintptr_t key, uintptr_t value) {
      if (!StrIs(key, name)) return true;
      found = value;
      return false;
    });
    return found;
  }

  // sys.modules: a dict holding "sys" -> a module, at the remembered offset of the interpreter
  // state, else the first such word of its first kScanBytes.
  uintptr_t Modules(uintptr_t interp) {
    PythonThreadNames::Cache& c = n_.cache_;
    auto is_modules = [&](uintptr_t dict) {
      size_t index = 0;
      uintptr_t sys = Lookup(dict, "sys", kMaxModules, &index);
      return sys != 0 && TypeIs(sys, n_.module_type_);
    };
    uintptr_t dict = 0;
    const size_t guess = c.modules_found ? c.modules_offset : l_.interp_modules;
    if (Word(interp + guess, &dict) && TypeIs(dict, n_.dict_type_) && is_modules(dict)) {
      c.modules_offset = guess;
      c.modules_found = true;
      return dict;
    }
    std::vector<uintptr_t> words(kScanBytes / sizeof(uintptr_t));
    size_t n = words.size();
    while (n > 0 && !Read(words.data(), interp, n * sizeof(uintptr_t))) n /= 2;
    for (size_t i = 0; i < n; ++i) {
      if (words[i] == 0 || (words[i] & 7) != 0 || !TypeIs(words[i], n_.dict_type_)) continue;
      if (is_modules(words[i])) {
        c.modules_offset = i * sizeof(uintptr_t);
        c.modules_found = true;
        return words[i];
      }
    }
    return 0;
  }

 private:
  PythonThreadNames& n_;
  const PythonThreadNames::Layout& l_;
  FaultGuard& guard_;
};

bool PythonThreadNames::Init(int minor, const std::function<void*(const char*)>& find) {
  ready_ = false;
  Layout l;
  l.minor = minor;
  l.ascii_size = minor >= 12 ? 40 : 48;
  l.compact_size = minor >= 12 ? 56 : 72;
  switch (minor) {
    case 7: l.interp_modules = 40; break;
    case 8: l.interp_modules = 56; break;
    case 9:
    case 10: l.interp_modules = 856; break;
    case 11: l.interp_modules = 888, l.ht_cached_keys = 872; break;
    case 12: l.interp_modules = 944, l.ht_cached_keys = 880; break;
    case 13: l.interp_modules = 7656, l.ht_cached_keys = 880; break;
    default: status_ = "object layout of Python 3." + std::to_string(minor) + " unknown"; return false;
  }
  if (sizeof(void*) != 8) return (status_ = "64-bit processes only"), false;
  layout_ = l;
  dict_type_ = reinterpret_cast<uintptr_t>(find("PyDict_Type"));
  str_type_ = reinterpret_cast<uintptr_t>(find("PyUnicode_Type"));
  long_type_ = reinterpret_cast<uintptr_t>(find("PyLong_Type"));
  module_type_ = reinterpret_cast<uintptr_t>(find("PyModule_Type"));
  interp_main_ = reinterpret_cast<void* (*)()>(find("PyInterpreterState_Main"));
  if (dict_type_ == 0 || str_type_ == 0 || long_type_ == 0 || module_type_ == 0 || interp_main_ == nullptr)
    return (status_ = "type objects not found"), false;
  // A build with another object header (free-threaded 3.13t) has None's type elsewhere.
  auto none = reinterpret_cast<uintptr_t>(find("_Py_NoneStruct"));
  auto none_type = reinterpret_cast<uintptr_t>(find("_PyNone_Type"));
  cache_ = Cache{};
  FaultGuard guard;
  NameReader r(this, &guard);
  if (none == 0 || none_type == 0 || !r.TypeIs(none, none_type))
    return (status_ = "unknown object header (free-threaded build?)"), false;
  ready_ = true;
  status_ = "ok";
  return true;
}

bool PythonThreadNames::Read(FaultGuard* guard, std::unordered_map<uint64_t, std::string>* out, std::string* error) {
  out->clear();
  if (!ready_) return (*error = status_), false;
  if (!guard->installed()) return (*error = "no fault guard (sigaction failed)"), false;
  if (cache_.pid != getpid()) cache_ = Cache{getpid()};  // after fork: look again
  NameReader r(this, guard);
  auto fail = [&](const char* what) {
    *error = what;
    out->clear();
    return false;
  };
  const uintptr_t interp = reinterpret_cast<uintptr_t>(interp_main_());
  if (interp == 0) return fail("no interpreter");
  const uintptr_t modules = r.Modules(interp);
  if (modules == 0) return fail("sys.modules not found");
  const uintptr_t threading = r.Lookup(modules, "threading", kMaxModules, &cache_.threading_entry);
  if (threading == 0) return true;  // not imported: no named threads
  uintptr_t mdict = 0;
  if (!r.TypeIs(threading, module_type_) || !r.Word(threading + kMdDict, &mdict)) return fail("threading unreadable");
  const uintptr_t active = r.Lookup(mdict, "_active", 65536, &cache_.active_entry);
  if (active == 0) return fail("threading._active not found");
  const bool ok = r.ForEach(active, kMaxThreads, 0, [&](size_t, uintptr_t key, uintptr_t thread) {
    uint64_t ident = 0;
    std::string name;
    uintptr_t name_obj = r.Attribute(thread, "_name");
    if (r.Unsigned(key, &ident) && name_obj != 0 && r.Str(name_obj, kMaxNameChars, &name))
      (*out)[ident] = std::move(name);
    return true;
  });
  if (!ok) return fail("threading._active unreadable");
  return true;
}

}  // namespace xtimer::capture
