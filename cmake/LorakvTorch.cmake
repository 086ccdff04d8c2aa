# libtorch for lorakv: the one inside the pinned PyPI torch (LORAKV_TORCH_DIR, the torch
# package folder, which tools/build.sh passes). Defines the INTERFACE target lorakv_torch
# and LORAKV_WITH_CUDA.
#
# Two ways in, chosen so that a machine without the CUDA toolkit still builds:
#  - CUDA: nvcc is found and LORAKV_CUDA is AUTO or ON. torch's own CMake config is used
#    (it needs nvcc at configure time) and the CUDA kernels are built.
#  - CPU: no nvcc, or LORAKV_CUDA=OFF. torch's CPU libraries (libtorch_cpu, libc10) and
#    headers are imported directly; torch's CMake config, which would ask for nvcc, is not
#    read. Everything lorakv runs on the CPU lives in those two libraries.
set(LORAKV_TORCH_DIR "" CACHE PATH "The torch package folder (site-packages/torch)")
set(LORAKV_CUDA AUTO CACHE STRING "Build CUDA kernels: AUTO, ON or OFF")
set_property(CACHE LORAKV_CUDA PROPERTY STRINGS AUTO ON OFF)
if(NOT IS_DIRECTORY "${LORAKV_TORCH_DIR}/lib" OR NOT IS_DIRECTORY "${LORAKV_TORCH_DIR}/include")
  message(FATAL_ERROR "LORAKV_TORCH_DIR='${LORAKV_TORCH_DIR}' is not a torch package folder "
                      "(it needs lib/ and include/). tools/build.sh sets it from the project's "
                      "Python environment; run tools/setup_python.sh first.")
endif()

set(LORAKV_WITH_CUDA OFF)
set(_lorakv_nvcc_found OFF)
if(NOT LORAKV_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(_lorakv_nvcc_found ON)
  elseif(LORAKV_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LORAKV_CUDA=ON but nvcc was not found (install the CUDA 13.0 toolkit "
                        "or configure with -DLORAKV_CUDA=AUTO for a CPU-only build)")
  endif()
endif()

add_library(lorakv_torch INTERFACE)
if(_lorakv_nvcc_found)
  find_package(Torch REQUIRED PATHS "${LORAKV_TORCH_DIR}/share/cmake/Torch" NO_DEFAULT_PATH)
  target_link_libraries(lorakv_torch INTERFACE ${TORCH_LIBRARIES})
  # Torch's own headers are system includes so our warning flags do not apply to them.
  target_include_directories(lorakv_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  separate_arguments(_torch_cxx_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(lorakv_torch INTERFACE ${_torch_cxx_flags})
  if(TORCH_CUDA_LIBRARIES)
    set(LORAKV_WITH_CUDA ON)
  elseif(LORAKV_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LORAKV_CUDA=ON but ${LORAKV_TORCH_DIR} is not a CUDA build of torch")
  endif()
else()
  set(LORAKV_TORCH_CXX11_ABI 1 CACHE STRING "torch's _GLIBCXX_USE_CXX11_ABI (torch.compiled_with_cxx11_abi())")
  foreach(_lib torch_cpu c10)
    find_library(LORAKV_TORCH_LIB_${_lib} NAMES ${_lib} PATHS "${LORAKV_TORCH_DIR}/lib"
                 NO_DEFAULT_PATH NO_CACHE REQUIRED)
    target_link_libraries(lorakv_torch INTERFACE "${LORAKV_TORCH_LIB_${_lib}}")
  endforeach()
  target_include_directories(lorakv_torch SYSTEM INTERFACE "${LORAKV_TORCH_DIR}/include"
                             "${LORAKV_TORCH_DIR}/include/torch/csrc/api/include")
  target_compile_definitions(lorakv_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${LORAKV_TORCH_CXX11_ABI})
endif()
if(LORAKV_WITH_CUDA)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
endif()

# ATen's at::parallel_for is an inline template: it runs on several threads only where the
# calling file is compiled with OpenMP (_OPENMP defined); elsewhere it silently runs the
# whole range on the calling thread. So lorakv's C++ is compiled with -fopenmp and linked
# with the libgomp that torch ships, the same runtime and thread pool its own kernels use
# (two OpenMP runtimes in one process would each keep a pool of spinning threads). Off for
# ThreadSanitizer builds, where the uninstrumented runtime would only add false reports.
option(LORAKV_OPENMP "Run lorakv's at::parallel_for loops on torch's OpenMP threads" ON)
if(LORAKV_OPENMP)
  find_library(LORAKV_TORCH_GOMP NAMES libgomp.so.1 gomp PATHS "${LORAKV_TORCH_DIR}/lib" NO_DEFAULT_PATH NO_CACHE)
  if(LORAKV_TORCH_GOMP)
    target_link_libraries(lorakv_torch INTERFACE "${LORAKV_TORCH_GOMP}")
  else()  # a torch that uses the system's OpenMP runtime
    find_package(OpenMP REQUIRED COMPONENTS CXX)
    target_link_libraries(lorakv_torch INTERFACE OpenMP::OpenMP_CXX)
  endif()
  target_compile_options(lorakv_torch INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fopenmp>)
endif()
