#include "common/stacks/py_qualname.h"

#include <cctype>

#include "common/regular_file.h"

namespace xtimer {
namespace {

constexpr size_t kMaxSource = size_t{16} << 20;  // a larger "source" is not one

bool IdentChar(unsigned char c) { return c == '_' || std::isalnum(c) || c >= 0x80; }

// The name after `def `/`async def `/`class ` at the start of `s` (already stripped of its
// indentation), or "".
std::string HeaderName(std::string_view s, bool* is_def) {
  auto word = [&](std::string_view w) {
    if (!s.starts_with(w) || s.size() == w.size() || (s[w.size()] != ' ' && s[w.size()] != '\t')) return false;
    s.remove_prefix(w.size());
    while (!s.empty() && (s[0] == ' ' || s[0] == '\t')) s.remove_prefix(1);
    return true;
  };
  if (word("async")) {
    if (!word("def")) return "";
    *is_def = true;
  } else if (word("def")) {
    *is_def = true;
  } else if (word("class")) {
    *is_def = false;
  } else {
    return "";
  }
  size_t n = 0;
  while (n < s.size() && IdentChar(static_cast<unsigned char>(s[n]))) ++n;
  if (n == 0 || std::isdigit(static_cast<unsigned char>(s[0]))) return "";
  return std::string(s.substr(0, n));
}

std::string QualOf(const std::vector<PyQualnames::Block>& blocks, int i, std::string tail) {
  while (i >= 0) {
    const PyQualnames::Block& b = blocks[static_cast<size_t>(i)];
    tail = b.name + (b.is_def ? ".<locals>." : ".") + tail;
    i = b.parent;
  }
  return tail;
}

}  // namespace

std::vector<PyQualnames::Block> PyQualnames::ParseBlocks(std::string_view src) {
  std::vector<Block> blocks;
  std::vector<int> open;  // indices into blocks, innermost last
  // Tokenizer state carried across lines.
  char quote = 0;          // inside a string: its quote character
  bool triple = false;     // ... a triple-quoted one
  bool raw = false;        // ... with an r prefix (backslashes escape nothing)
  int depth = 0;           // open brackets
  bool continued = false;  // the last line ended with a backslash
  int lineno = 0;
  size_t pos = 0;
  while (pos < src.size()) {
    size_t eol = src.find('\n', pos);
    if (eol == std::string_view::npos) eol = src.size();
    std::string_view line = src.substr(pos, eol - pos);
    pos = eol + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    if (quote == 0 && depth == 0 && !continued) {
      // A logical line starts here: its indentation closes blocks.
      int col = 0;
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\f'))
        col = line[i] == '\t' ? (col / 8 + 1) * 8 : line[i] == ' ' ? col + 1 : 0, ++i;
      if (i < line.size() && line[i] != '#') {
        while (!open.empty() && blocks[static_cast<size_t>(open.back())].indent >= col) {
          blocks[static_cast<size_t>(open.back())].last = lineno - 1;
          open.pop_back();
        }
        bool is_def = false;
        std::string name = HeaderName(line.substr(i), &is_def);
        if (!name.empty()) {
          Block b;
          b.name = std::move(name);
          b.is_def = is_def;
          b.indent = col;
          b.first = lineno;
          b.parent = open.empty() ? -1 : open.back();
          blocks.push_back(std::move(b));
          open.push_back(static_cast<int>(blocks.size()) - 1);
        }
      }
    }
    continued = false;
    // The rest of the line: strings, brackets, comments, a final backslash.
    for (; i < line.size(); ++i) {
      char c = line[i];
      if (quote != 0) {
        if (c == '\\' && !raw) {
          ++i;
          continue;
        }
        if (c != quote) continue;
        if (!triple) {
          quote = 0;
        } else if (line.substr(i, 3) == std::string(3, quote)) {
          quote = 0;
          i += 2;
        }
        continue;
      }
      if (c == '#') break;
      if (c == '(' || c == '[' || c == '{') ++depth;
      else if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      else if (c == '\'' || c == '"') {
        // Its prefix letters (r, b, f, u in any case and order) decide whether \ escapes.
        raw = false;
        for (size_t k = i; k > 0 && std::isalpha(static_cast<unsigned char>(line[k - 1])); --k)
          raw = raw || line[k - 1] == 'r' || line[k - 1] == 'R';
        quote = c;
        triple = line.substr(i, 3) == std::string(3, c);
        if (triple) i += 2;
      } else if (c == '\\' && i + 1 == line.size()) {
        continued = true;
      }
    }
    if (quote != 0 && !triple) quote = 0;  // an unterminated one-line string ends with its line
  }
  for (int b : open) blocks[static_cast<size_t>(b)].last = lineno;
  return blocks;
}

std::string PyQualnames::QualifyIn(std::string_view source, const std::string& function, int line) {
  return QualifyBlocks(ParseBlocks(source), function, line);
}

std::string PyQualnames::QualifyBlocks(const std::vector<Block>& blocks, const std::string& function, int line) {
  if (function.empty() || line <= 0 || function == "<module>") return "";
  auto holds = [&](const Block& b) { return b.first <= line && line <= b.last; };
  int best = -1;
  if (function[0] == '<') {  // <lambda>, <genexpr>, <listcomp>...: named after where they are
    for (size_t i = 0; i < blocks.size(); ++i)
      if (holds(blocks[i])) best = static_cast<int>(i);  // later blocks are inner ones
    return best < 0 ? function : QualOf(blocks, best, function);
  }
  for (size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].is_def && blocks[i].name == function && holds(blocks[i])) best = static_cast<int>(i);
  if (best < 0) return "";
  return QualOf(blocks, blocks[static_cast<size_t>(best)].parent, function);
}

PyQualnames::PyQualnames(std::string sysroot) : sysroot_(std::move(sysroot)) {}
PyQualnames::~PyQualnames() = default;

std::string PyQualnames::Qualify(const std::string& file, const std::string& function, int line) {
  if (file.empty() || file[0] != '/') return "";  // "<frozen ...>", "<string>", a relative path
  auto it = files_.find(file);
  if (it == files_.end()) {
    // A path from a stack file: by the common rule (a FIFO there must not hang us).
    std::unique_ptr<std::vector<Block>> blocks;
    FileRule rule;
    rule.what = "Python source";
    rule.max_bytes = kMaxSource;
    std::string text, error;
    if (ReadRegularFile(sysroot_ + file, rule, &text, &error))
      blocks = std::make_unique<std::vector<Block>>(ParseBlocks(text));
    it = files_.emplace(file, std::move(blocks)).first;
  }
  return it->second ? QualifyBlocks(*it->second, function, line) : "";
}

}  // namespace xtimer
