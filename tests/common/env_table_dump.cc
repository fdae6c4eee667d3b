// Prints the XTIMER_* table as "name<TAB>default" lines for check_env_docs.py.
#include <cstdio>

#include "common/env.h"

int main() {
  for (const auto& v : xtimer::env::All()) std::printf("%s\t%s\n", v.name, v.default_value);
}
