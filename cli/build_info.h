// cli/build_info.h: what this lorakv binary is: its version and the git commit it was
// built from. The values live in a file CMake writes into the build folder (the version
// from the top-level CMakeLists.txt, the commit read by cli/cmake/write_build_info.cmake on
// every build, so a new HEAD only recompiles that one file).
#pragma once

namespace lorakv::cli {

// "0.1.0".
const char* lorakv_version();
// The short commit hash ("1a2b3c4d5e6f"), "-dirty" appended when tracked files differed from
// it at build time; "unknown" when not built from a git checkout (or git was missing).
const char* lorakv_git_commit();
// The source folder this binary was built from (its checkout: models/, assets/, tools/),
// where the benchmarks find their default files when run from another folder.
const char* lorakv_source_dir();

}  // namespace lorakv::cli
