// Prints what dlsym(RTLD_NEXT) from a library finds: 2 is right (the next library's symbol).
#include <cstdio>

extern "C" int xt_probe_next_value();
extern "C" int xt_second_loaded();

int main() {
  if (xt_second_loaded() != 1) return 2;  // the library after rtld_next_first is loaded
  int v = xt_probe_next_value();
  std::printf("RTLD_NEXT found value %d\n", v);
  return v == 2 ? 0 : 1;
}
