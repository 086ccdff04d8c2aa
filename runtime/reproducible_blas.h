// runtime/reproducible_blas.h: bit-reproducible CPU BLAS for the process (see the .cpp).
#pragma once

namespace lorakv::runtime {

// Whether MKL_CBWR holds lorakv's request (or the user's own setting, which wins). Calling
// it links the request into a program (it is made before main, when static objects start).
bool reproducible_blas_requested();

}  // namespace lorakv::runtime
