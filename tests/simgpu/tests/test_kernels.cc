#include "test_kernels.h"

#include <algorithm>

extern "C" SIMGPU_KERNEL void simgpu_test_sleep(void** args) { simgpu_sleep_ns(*static_cast<int64_t*>(args[0])); }
SIMGPU_KERNEL_PARAMS(simgpu_test_sleep, sizeof(int64_t));

extern "C" SIMGPU_KERNEL void simgpu_test_store(void** args) {
  auto* dst = *static_cast<int**>(args[0]);
  std::atomic_ref<int>(*dst).store(*static_cast<int*>(args[1]));
}
SIMGPU_KERNEL_PARAMS(simgpu_test_store, sizeof(int*), sizeof(int));

extern "C" SIMGPU_KERNEL void simgpu_test_wait_flag(void** args) {
  auto* flag = *static_cast<std::atomic<int>**>(args[0]);
  int v;
  while ((v = flag->load()) == 0) flag->wait(v);
}
SIMGPU_KERNEL_PARAMS(simgpu_test_wait_flag, sizeof(void*));

extern "C" SIMGPU_KERNEL void simgpu_test_increment(void** args) {
  (*static_cast<std::atomic<int>**>(args[0]))->fetch_add(1);
}
SIMGPU_KERNEL_PARAMS(simgpu_test_increment, sizeof(void*));

extern "C" SIMGPU_KERNEL void simgpu_test_copy_int(void** args) {
  int* src = *static_cast<int**>(args[0]);
  int* dst = *static_cast<int**>(args[1]);
  std::atomic_ref<int>(*dst).store(std::atomic_ref<int>(*src).load());
}
SIMGPU_KERNEL_PARAMS(simgpu_test_copy_int, sizeof(int*), sizeof(int*));

extern "C" SIMGPU_KERNEL void simgpu_test_append(void** args) {
  auto* v = *static_cast<std::vector<int>**>(args[0]);
  v->push_back(*static_cast<int*>(args[1]));
}
SIMGPU_KERNEL_PARAMS(simgpu_test_append, sizeof(void*), sizeof(int));

extern "C" SIMGPU_KERNEL void simgpu_test_barrier(void** args) {
  auto* arrived = *static_cast<std::atomic<int>**>(args[0]);
  const int n = *static_cast<int*>(args[1]);
  arrived->fetch_add(1);
  arrived->notify_all();
  int v;
  while ((v = arrived->load()) < n) arrived->wait(v);
}
SIMGPU_KERNEL_PARAMS(simgpu_test_barrier, sizeof(void*), sizeof(int));
