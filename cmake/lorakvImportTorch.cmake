# lorakv_import_torch(<target> [IMPORTED] TORCH_DIR <dir> CUDA <AUTO|ON|OFF> CXX11_ABI <0|1>
#                     OPENMP <ON|OFF> [WITH_CUDA_VAR <var>])
# Creates the INTERFACE target <target> (an IMPORTED one, scoped to the calling directory like
# torch's own targets, when IMPORTED is given) with what a program needs to compile against and
# link libtorch from the torch package folder <dir> (site-packages/torch). Used twice: by
# lorakv's own build (cmake/LorakvTorch.cmake) and by the installed lorakvConfig.cmake, so a
# program that links the installed lorakv finds torch the same way lorakv did.
#
# Two ways in, chosen so that a machine without the CUDA toolkit still builds:
#  - CUDA: nvcc is found and CUDA is AUTO or ON. torch's own CMake config is used (it needs
#    nvcc at configure time); <var> is set ON when that torch has CUDA libraries.
#  - CPU: no nvcc, or CUDA=OFF. torch's CPU libraries (libtorch_cpu, libc10) and headers are
#    imported directly; torch's CMake config, which would ask for nvcc, is not read.
# With OPENMP ON the target also links the libgomp that torch ships (lorakv's code runs
# at::parallel_for on torch's OpenMP threads, so its objects call into that runtime); the
# -fopenmp compile flag is lorakv's own business and is not part of <target>.
function(lorakv_import_torch target)
  cmake_parse_arguments(ARG "IMPORTED" "TORCH_DIR;CUDA;CXX11_ABI;OPENMP;WITH_CUDA_VAR" "" ${ARGN})
  if(NOT IS_DIRECTORY "${ARG_TORCH_DIR}/lib" OR NOT IS_DIRECTORY "${ARG_TORCH_DIR}/include")
    message(FATAL_ERROR "LORAKV_TORCH_DIR='${ARG_TORCH_DIR}' is not a torch package folder (it needs "
                        "lib/ and include/). Pass the folder of the pinned torch, e.g. "
                        "-DLORAKV_TORCH_DIR=$(python -c 'import os, torch; print(os.path.dirname(torch.__file__))')")
  endif()
  set(_nvcc_found OFF)
  if(NOT ARG_CUDA STREQUAL "OFF")
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(_nvcc_found ON)
    elseif(ARG_CUDA STREQUAL "ON")
      message(FATAL_ERROR "CUDA=ON but nvcc was not found (install the CUDA 13.0 toolkit, put nvcc on PATH "
                          "or pass -DCMAKE_CUDA_COMPILER=<nvcc>)")
    endif()
  endif()

  if(ARG_IMPORTED)
    add_library(${target} INTERFACE IMPORTED)
  else()
    add_library(${target} INTERFACE)
  endif()
  set(_with_cuda OFF)
  if(_nvcc_found)
    find_package(Torch REQUIRED PATHS "${ARG_TORCH_DIR}/share/cmake/Torch" NO_DEFAULT_PATH)
    target_link_libraries(${target} INTERFACE ${TORCH_LIBRARIES})
    # Torch's own headers are system includes so the consumer's warning flags skip them.
    target_include_directories(${target} SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
    separate_arguments(_torch_cxx_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
    target_compile_options(${target} INTERFACE ${_torch_cxx_flags})
    if(TORCH_CUDA_LIBRARIES)
      set(_with_cuda ON)
    elseif(ARG_CUDA STREQUAL "ON")
      message(FATAL_ERROR "CUDA=ON but ${ARG_TORCH_DIR} is not a CUDA build of torch")
    endif()
  else()
    foreach(_lib torch_cpu c10)
      find_library(_lorakv_torch_lib_${_lib} NAMES ${_lib} PATHS "${ARG_TORCH_DIR}/lib"
                   NO_DEFAULT_PATH NO_CACHE REQUIRED)
      target_link_libraries(${target} INTERFACE "${_lorakv_torch_lib_${_lib}}")
    endforeach()
    target_include_directories(${target} SYSTEM INTERFACE "${ARG_TORCH_DIR}/include"
                               "${ARG_TORCH_DIR}/include/torch/csrc/api/include")
    target_compile_definitions(${target} INTERFACE _GLIBCXX_USE_CXX11_ABI=${ARG_CXX11_ABI})
  endif()
  if(ARG_OPENMP)
    find_library(_lorakv_torch_gomp NAMES libgomp.so.1 gomp PATHS "${ARG_TORCH_DIR}/lib" NO_DEFAULT_PATH NO_CACHE)
    if(_lorakv_torch_gomp)
      target_link_libraries(${target} INTERFACE "${_lorakv_torch_gomp}")
    else()  # a torch that uses the system's OpenMP runtime
      find_package(OpenMP REQUIRED COMPONENTS CXX)
      target_link_libraries(${target} INTERFACE OpenMP::OpenMP_CXX)
    endif()
  endif()
  if(ARG_WITH_CUDA_VAR)
    set(${ARG_WITH_CUDA_VAR} ${_with_cuda} PARENT_SCOPE)
  endif()
endfunction()
