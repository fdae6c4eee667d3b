#include "preload/capture/elf_symtab.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace xtimer::capture {
namespace {

struct Mapping {
  const unsigned char* data = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (data != nullptr) munmap(const_cast<unsigned char*>(data), size);
  }
  bool Has(uint64_t offset, uint64_t len) const { return offset <= size && len <= size - offset; }
};

}  // namespace

bool LookupElfSymbols(const std::string& path, std::span<const char* const> names, std::span<uint64_t> values,
                      std::string* error) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return (*error = "cannot open " + path + ": " + std::strerror(errno)), false;
  struct stat st;
  Mapping m;
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      m.data = static_cast<const unsigned char*>(p);
      m.size = static_cast<size_t>(st.st_size);
    }
  }
  close(fd);
  if (m.data == nullptr || !m.Has(0, sizeof(Elf64_Ehdr))) return (*error = "cannot map " + path), false;
  Elf64_Ehdr eh;
  std::memcpy(&eh, m.data, sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !m.Has(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) {
    return (*error = path + " is not a 64-bit little-endian ELF file with section headers"), false;
  }
  auto section = [&](uint32_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, m.data + eh.e_shoff + uint64_t{i} * sizeof sh, sizeof sh);
    return sh;
  };
  // .symtab first: it holds the local (hidden) symbols; .dynsym only the exported ones.
  for (uint32_t want : {uint32_t{SHT_SYMTAB}, uint32_t{SHT_DYNSYM}}) {
    for (uint32_t i = 0; i < eh.e_shnum; ++i) {
      Elf64_Shdr sh = section(i);
      if (sh.sh_type != want || sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh.e_shnum) continue;
      Elf64_Shdr str = section(sh.sh_link);
      if (!m.Has(sh.sh_offset, sh.sh_size) || !m.Has(str.sh_offset, str.sh_size)) continue;
      const char* strtab = reinterpret_cast<const char*>(m.data + str.sh_offset);
      for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= sh.sh_size; off += sizeof(Elf64_Sym)) {
        Elf64_Sym sym;
        std::memcpy(&sym, m.data + sh.sh_offset + off, sizeof sym);
        if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0 || sym.st_name >= str.sh_size) continue;
        const char* name = strtab + sym.st_name;
        size_t max_len = str.sh_size - sym.st_name;
        for (size_t k = 0; k < names.size() && k < values.size(); ++k) {
          if (values[k] != 0) continue;
          size_t len = std::strlen(names[k]);
          if (len < max_len && std::memcmp(name, names[k], len + 1) == 0) values[k] = sym.st_value;
        }
      }
    }
  }
  return true;
}

}  // namespace xtimer::capture
