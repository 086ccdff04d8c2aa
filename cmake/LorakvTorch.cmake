# libtorch for lorakv: the one inside the pinned PyPI torch (LORAKV_TORCH_DIR, the torch
# package folder, which tools/build.sh passes). Defines the INTERFACE target lorakv_torch
# (installed as lorakv::torch) and LORAKV_WITH_CUDA. The two routes to torch (its CMake config
# where nvcc exists, its CPU libraries imported directly otherwise) live in
# cmake/lorakvImportTorch.cmake, which the installed lorakvConfig.cmake runs again on the
# consumer's machine: lorakv_torch carries the build's torch only inside the build tree.
set(LORAKV_TORCH_DIR "" CACHE PATH "The torch package folder (site-packages/torch)")
set(LORAKV_CUDA AUTO CACHE STRING "Build CUDA kernels: AUTO, ON or OFF")
set_property(CACHE LORAKV_CUDA PROPERTY STRINGS AUTO ON OFF)
set(LORAKV_TORCH_CXX11_ABI 1 CACHE STRING "torch's _GLIBCXX_USE_CXX11_ABI (torch.compiled_with_cxx11_abi())")

# ATen's at::parallel_for is an inline template: it runs on several threads only where the
# calling file is compiled with OpenMP (_OPENMP defined); elsewhere it silently runs the
# whole range on the calling thread. So lorakv's C++ is compiled with -fopenmp (its own
# targets only: lorakv_target_defaults) and linked with the libgomp that torch ships, the same
# runtime and thread pool its own kernels use (two OpenMP runtimes in one process would each
# keep a pool of spinning threads). Off for ThreadSanitizer builds, where the uninstrumented
# runtime would only add false reports.
option(LORAKV_OPENMP "Run lorakv's at::parallel_for loops on torch's OpenMP threads" ON)

include(lorakvImportTorch)
lorakv_import_torch(lorakv_torch_build TORCH_DIR "${LORAKV_TORCH_DIR}" CUDA "${LORAKV_CUDA}"
                    CXX11_ABI "${LORAKV_TORCH_CXX11_ABI}" OPENMP "${LORAKV_OPENMP}"
                    WITH_CUDA_VAR LORAKV_WITH_CUDA)
add_library(lorakv_torch INTERFACE)
set_target_properties(lorakv_torch PROPERTIES EXPORT_NAME torch)
target_link_libraries(lorakv_torch INTERFACE $<BUILD_INTERFACE:lorakv_torch_build>
                      $<INSTALL_INTERFACE:lorakv::torch_libraries>)
if(LORAKV_WITH_CUDA)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
endif()
