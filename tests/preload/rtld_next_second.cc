extern "C" __attribute__((visibility("default"))) int xt_probe_value() { return 2; }
// Referenced by rtld_next_main so the linker keeps this library (--as-needed).
extern "C" __attribute__((visibility("default"))) int xt_second_loaded() { return 1; }
