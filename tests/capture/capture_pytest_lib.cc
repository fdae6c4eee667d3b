// A small C library that Python tests load with ctypes: starts the dumper in the interpreter's
// process (as the preload will) and offers a call that blocks while holding the GIL.
#include <unistd.h>

#include <cerrno>

#include "preload/capture/dumper.h"

extern "C" {

// 1 on success. Stack files go to `dir`; the rank comes from RANK/WORLD_SIZE.
__attribute__((visibility("default"))) int xtc_start(const char* dir) {
  xtimer::capture::DumperOptions opt;
  opt.timeline_path = dir;
  return xtimer::capture::Dumper::Instance().Start(nullptr, opt) ? 1 : 0;
}

// Called through ctypes.PyDLL, so the GIL stays held: reads one byte from fd (blocking) and
// returns it, or -errno. noinline: its name must show in the symbolised native stack.
__attribute__((visibility("default"), noinline)) int xtc_read_byte_holding_gil(int fd) {
  unsigned char c = 0;
  ssize_t n = read(fd, &c, 1);
  if (n == 1) return c;
  return n < 0 ? -errno : -1000;
}

}  // extern "C"
