#include "spec_decode/drafter.h"

#include "kernels/ops.h"

namespace dspark {

int32_t DraftSampling::draw(float* row, int V, Sampler& sampler, float* q_row) const {
  if (processor) processor->apply(row);
  int32_t token;
  if (dense_q()) {
    sampler.dense(row, V, params, q_row);
    token = Sampler::draw_dense(q_row, V, *rng);
  } else {
    token = argmax(row, V);
  }
  if (processor) processor->push(token);
  return token;
}

}  // namespace dspark
