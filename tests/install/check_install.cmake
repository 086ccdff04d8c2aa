# cmake -DBUILD_DIR=... -DCONSUMER_DIR=<examples> -DWORK=... -DTORCH_DIR=... -DMODEL=...
#       -DROLE_ADAPTERS=... -DEXPECTED_VERSION=... [-DGENERATOR=... -DMAKE_PROGRAM=... -DCXX=...
#       -DCUDA_COMPILER=... -DCUDA_MODE=...] -P check_install.cmake
# Installs lorakv from BUILD_DIR into WORK/prefix, builds the examples project against it and
# checks what two_agents prints. See tests/install/CMakeLists.txt.
cmake_minimum_required(VERSION 3.22)

# run(<what> <command...>): runs a command, stops with its output when it fails; the output
# is left in _out.
macro(run what)
  string(TIMESTAMP _t0 "%s")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  string(TIMESTAMP _t1 "%s")
  math(EXPR _dt "${_t1} - ${_t0}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${_rc}):\n${_out}\n${_err}")
  endif()
  message(STATUS "${what}: ${_dt} s")
endmacro()

file(REMOVE_RECURSE ${WORK})
set(_prefix ${WORK}/prefix)
run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${_prefix})

# The installed tree: prefixed headers, layer archives, the package files; nothing of the
# command line's internals, and no header outside include/lorakv/.
foreach(_path include/lorakv/common/errors.h include/lorakv/runtime/engine.h include/lorakv/kernels/cpu/lora_rows.h
              include/lorakv/agents/runtime.h include/lorakv/agents/session.h lib/liblorakv_agents.a
              include/lorakv/agents/config/load_session_config.h lib/liblorakv_agents_config.a
              lib/liblorakv_runtime.a lib/liblorakv_common.a lib/cmake/lorakv/lorakvConfig.cmake
              lib/cmake/lorakv/lorakvConfigVersion.cmake lib/cmake/lorakv/lorakvTargets.cmake bin/lorakv)
  if(NOT EXISTS ${_prefix}/${_path})
    message(FATAL_ERROR "the install has no ${_path}")
  endif()
endforeach()
file(GLOB _top_includes RELATIVE ${_prefix}/include ${_prefix}/include/*)
if(NOT _top_includes STREQUAL "lorakv")
  message(FATAL_ERROR "include/ should hold only lorakv/, found: ${_top_includes}")
endif()
foreach(_absent include/lorakv/cli lib/liblorakv_cli.a)
  if(EXISTS ${_prefix}/${_absent})
    message(FATAL_ERROR "the install should not carry ${_absent}")
  endif()
endforeach()

# The installed command starts on its own, with no library path set: libtorch and torch's
# own libgomp (not the system's) come from its run path; then it generates a token.
set(ENV{LD_LIBRARY_PATH} "")
run("installed lorakv --version" ${_prefix}/bin/lorakv --version)
if(NOT _out MATCHES "lorakv ${EXPECTED_VERSION}")
  message(FATAL_ERROR "the installed lorakv --version printed:\n${_out}")
endif()
get_filename_component(_torch_lib "${TORCH_DIR}/lib" REALPATH)
run("ldd of the installed lorakv" ldd ${_prefix}/bin/lorakv)
foreach(_lib libtorch.so libgomp.so.1)
  string(REGEX MATCH "${_lib} => [^ ]+" _line "${_out}")
  if(NOT _line MATCHES "=> ${_torch_lib}/${_lib}")
    message(FATAL_ERROR "the installed lorakv takes ${_lib} from elsewhere than ${_torch_lib}: '${_line}'")
  endif()
endforeach()
run("installed lorakv generate" ${_prefix}/bin/lorakv generate --model ${MODEL} --prompt "The capital of France is"
    --max-tokens 1)
if(_out STREQUAL "")
  message(FATAL_ERROR "the installed lorakv generate printed no token")
endif()

set(_configure ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -DCMAKE_PREFIX_PATH=${_prefix} -DCMAKE_BUILD_TYPE=Release)
if(GENERATOR)
  list(APPEND _configure -G ${GENERATOR})
endif()
foreach(_var MAKE_PROGRAM CXX CUDA_COMPILER)
  if(${_var})
    set(_name CMAKE_${_var})
    if(_var STREQUAL "CXX")
      set(_name CMAKE_CXX_COMPILER)
    endif()
    list(APPEND _configure -D${_name}=${${_var}})
  endif()
endforeach()
if(CUDA_MODE)
  list(APPEND _configure -DLORAKV_CUDA=${CUDA_MODE})
endif()
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")  # as tools/build.sh: stops torch's config probing GPUs
endif()

# Bad input: no torch folder. The config says what to pass.
unset(ENV{LORAKV_TORCH_DIR})
execute_process(COMMAND ${_configure} -B ${WORK}/no_torch RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(_rc EQUAL 0 OR NOT "${_out}${_err}" MATCHES "lorakv needs the torch package folder it was built with")
  message(FATAL_ERROR "find_package(lorakv) without LORAKV_TORCH_DIR should fail naming it:\n${_out}\n${_err}")
endif()

run("configure the examples" ${_configure} -B ${WORK}/build -DLORAKV_TORCH_DIR=${TORCH_DIR})
run("build the examples" ${CMAKE_COMMAND} --build ${WORK}/build)
run("run two_agents" ${WORK}/build/two_agents ${MODEL} ${ROLE_ADAPTERS})
set(_printed "${_out}")
message(STATUS "two_agents printed:\n${_printed}")
# The version line, then each agent's turn as its role adapter was trained to write it (the
# agents tests check such turns token for token against PEFT), then the stats.
if(NOT _printed MATCHES "^lorakv ([^\n]*)\nplanner: Thought: [^\n]*\nAction: Lookup\nactor: Lookup\\[[^\n]*\\]\ntokens: [0-9]+ in the trajectory, [1-9][0-9]* generated; KV bytes: [1-9][0-9]*;")
  message(FATAL_ERROR "unexpected two_agents output:\n${_printed}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL EXPECTED_VERSION)
  message(FATAL_ERROR "two_agents reports lorakv ${CMAKE_MATCH_1}, the build is ${EXPECTED_VERSION}")
endif()
message(STATUS "installed lorakv ${CMAKE_MATCH_1}: the example ran two role agents")

# The second example: a workflow of the user's own over the public API with a custom tool.
run("run custom_workflow" ${WORK}/build/custom_workflow ${MODEL} ${ROLE_ADAPTERS})
if(NOT _out MATCHES "user: How old was Dok Gramein in 1940\\?\n.*planner: Thought: [^\n]*\nAction: Lookup\nactor: Lookup\\[Dok Gramein\\]\ntool: Dok Gramein: born 1914, lives in Gramfal\\.\n.*answer: [0-9]+ \\([0-9]+ turns\\)\n")
  message(FATAL_ERROR "unexpected custom_workflow output:\n${_out}")
endif()
message(STATUS "custom_workflow printed:\n${_out}")
