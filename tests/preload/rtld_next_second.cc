extern "C" __attribute__((visibility("default"))) int xt_probe_value() { return 2; }
