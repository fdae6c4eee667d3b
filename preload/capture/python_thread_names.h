// The names Python code gave its threads (threading.Thread(name=...), "MainThread", ...), read
// without the GIL and without calling into Python, as an outside profiler reads them.
//
// threading keeps `_active`, a dict from thread ident (the pthread_t that faulthandler prints) to
// the Thread object, whose name is its `_name` attribute. We walk sys.modules -> "threading" ->
// `_active` -> each Thread's `_name` through CPython's object layouts (PyObject, dict, str, int,
// module, instance attributes), known for CPython 3.7 to 3.13 (GIL builds). Every read goes through
// a FaultGuard (fault_guard.h), as faulthandler's walk of the frames does: a pointer that another
// thread freed meanwhile faults into an error, not a crash; and every object is checked against
// its type object (found by name with dlsym) before its fields are trusted. A name can still come
// out stale or missing when threads start or end during the read.
//
// Runs on the dumper thread only (allocates; never in a signal handler).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

namespace xtimer::capture {

class FaultGuard;

class PythonThreadNames {
 public:
  // `minor`: CPython 3.minor. `find`: a symbol lookup in the Python runtime (dlsym-like).
  // False when this version's layout is unknown or a type object is missing (status() says why).
  bool Init(int minor, const std::function<void*(const char*)>& find);
  // thread ident -> name for every thread in threading._active, read through `guard` (held by
  // the caller, on this thread). False with *error when the names could not be read (out is
  // then empty); true with an empty map when threading is not imported.
  bool Read(FaultGuard* guard, std::unordered_map<uint64_t, std::string>* out, std::string* error);
  const std::string& status() const { return status_; }

  // Longest name kept, in characters; a longer one is cut and ends with "...".
  static constexpr size_t kMaxNameChars = 256;

 private:
  struct Layout {
    int minor = 0;
    size_t interp_modules = 0;  // sys.modules in PyInterpreterState (first guess; scanned if wrong)
    size_t ht_cached_keys = 0;  // PyHeapTypeObject.ht_cached_keys (3.11+)
    size_t ascii_size = 0;      // sizeof(PyASCIIObject)
    size_t compact_size = 0;    // sizeof(PyCompactUnicodeObject)
  };
  struct Cache {  // where things were found last time (always checked again before use)
    long pid = 0;
    size_t modules_offset = 0;
    bool modules_found = false;
    size_t threading_entry = 0;
    size_t active_entry = 0;
  };
  friend class NameReader;

  Layout layout_;
  Cache cache_;
  uintptr_t dict_type_ = 0, str_type_ = 0, long_type_ = 0, module_type_ = 0;
  void* (*interp_main_)() = nullptr;
  bool ready_ = false;
  std::string status_ = "not initialised";
};

}  // namespace xtimer::capture
