// cmake/pch_anchor.cpp: the one source of lorakv_aten_pch, the target that compiles the
// precompiled ATen header every libtorch-linking target reuses (cmake/LorakvPch.cmake).
namespace lorakv::detail {
int pch_anchor() { return 0; }
}  // namespace lorakv::detail
