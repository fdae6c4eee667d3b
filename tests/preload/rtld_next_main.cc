// Prints what dlsym(RTLD_NEXT) from a library finds: 2 is right (the next library's symbol).
#include <cstdio>

extern "C" int xt_probe_next_value();

int main() {
  int v = xt_probe_next_value();
  std::printf("RTLD_NEXT found value %d\n", v);
  return v == 2 ? 0 : 1;
}
