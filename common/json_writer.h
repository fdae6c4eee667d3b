// A minimal streaming JSON writer for code that must stay small (the preloaded library).
// Everything else reads and writes JSON with nlohmann-json. Commas are placed automatically;
// strings are escaped per RFC 8259; non-finite doubles are written as null.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace xtimer {

class JsonWriter {
 public:
  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }

  JsonWriter& Key(std::string_view k) {
    Comma();
    AppendString(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& String(std::string_view s) { return Value(), AppendString(s), *this; }
  JsonWriter& Int(int64_t v) { return Value(), out_ += std::to_string(v), *this; }
  JsonWriter& Uint(uint64_t v) { return Value(), out_ += std::to_string(v), *this; }
  JsonWriter& Bool(bool v) { return Value(), out_ += (v ? "true" : "false"), *this; }
  JsonWriter& Null() { return Value(), out_ += "null", *this; }
  JsonWriter& Double(double v) {
    Value();
    if (!std::isfinite(v)) return out_ += "null", *this;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return out_ += buf, *this;
  }

  // A number with a fixed count of decimals (timestamps: seconds since the epoch to the µs).
  JsonWriter& Fixed(double v, int decimals) {
    Value();
    if (!std::isfinite(v)) return out_ += "null", *this;
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return out_ += buf, *this;
  }

  // "key": value, the JSON type chosen from the C++ type.
  template <typename T>
  JsonWriter& Field(std::string_view k, const T& v) {
    Key(k);
    if constexpr (std::is_same_v<T, bool>) {
      return Bool(v);
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      return Int(v);
    } else if constexpr (std::is_integral_v<T>) {
      return Uint(v);
    } else if constexpr (std::is_floating_point_v<T>) {
      return Double(v);
    } else {
      return String(std::string_view(v));
    }
  }

  const std::string& str() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  JsonWriter& Open(char c) {
    Value();
    out_ += c;
    first_ = true;
    return *this;
  }
  JsonWriter& Close(char c) {
    out_ += c;
    first_ = false;
    return *this;
  }
  // Before a value: a comma unless it is the first in its container or follows a key.
  void Value() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    Comma();
  }
  void Comma() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void AppendString(std::string_view s) {
    out_ += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += static_cast<char>(c);
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  bool first_ = true;
  bool after_key_ = false;
};

}  // namespace xtimer
