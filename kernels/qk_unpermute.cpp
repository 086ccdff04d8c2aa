// kernels/qk_unpermute.cpp: the row un-permutation as a reshape and one transpose.
#include "lorakv/kernels/qk_unpermute.h"

#include <vector>

#include "lorakv/common/errors.h"

namespace lorakv::kernels {

at::Tensor unpermute_qk_rows(const at::Tensor& w, int64_t num_heads) {
  LORAKV_ASSERT(w.dim() >= 1 && num_heads > 0, "bad Q/K tensor for un-permute");
  const int64_t out = w.size(0);
  const int64_t head_dim = out / num_heads;
  LORAKV_ASSERT(out % num_heads == 0 && head_dim % 2 == 0, "bad Q/K shape for un-permute");
  // GGUF row 2j+i of a head holds HF row j + i*head_dim/2: view [heads, hd/2, 2, ...],
  // swap the two middle axes, flatten back.
  std::vector<int64_t> shape = {num_heads, head_dim / 2, 2};
  for (int64_t d = 1; d < w.dim(); ++d) shape.push_back(w.size(d));
  return w.reshape(shape).transpose(1, 2).reshape(w.sizes()).contiguous();
}

}  // namespace lorakv::kernels
