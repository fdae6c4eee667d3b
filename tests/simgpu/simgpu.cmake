# xtimer_add_sim_program(<name> SOURCES <src>...)
#
# An executable linked against the REAL CUDA toolkit (cudart, driver stub, cuBLAS, cuBLASLt,
# NCCL) that runs on the simulated GPU runtime with LD_LIBRARY_PATH=${XTIMER_SIMGPU_DIR}.
# Kernels defined in it are exported (ENABLE_EXPORTS) so dladdr/cudaFuncGetName can name them;
# simgpu/kernel.h is on its include path. Output goes to ${CMAKE_BINARY_DIR}/tests.
function(xtimer_add_sim_program name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES} ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE CUDA::cudart CUDA::cuda_driver CUDA::cublas CUDA::cublasLt xtimer_nccl
                        Threads::Threads ${CMAKE_DL_LIBS})
  target_include_directories(${name} PRIVATE ${XTIMER_SIMGPU_SOURCE_DIR}/include)
  # RUNPATH (not RPATH), so LD_LIBRARY_PATH wins over the build tree's path to /usr/local/cuda.
  target_link_options(${name} PRIVATE -Wl,--enable-new-dtags)
  set_target_properties(${name} PROPERTIES
    ENABLE_EXPORTS ON
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_dependencies(${name} simgpu)
endfunction()
