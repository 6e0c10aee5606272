// CPU kernels for the MNIST CNN's memory-bound stages (see __init__.py for why and how they are used).
// Layouts: "NHWC" = channels-last memory; every kernel runs on one thread (the engine runs one
// single-thread process per core). Max-pooling picks the first maximum in row-major window order
// (position k = 2 * dy + dx), exactly as torch's max_pool2d; idx holds k, or 4 where the ReLU zeroed
// the output (no gradient flows).
#include <torch/extension.h>

#include <cstdint>
#include <vector>

namespace {

// relu(max_pool2d(conv2d(x, w, b, padding=1), 2)) for one input channel.
// xp: [B, H + 2, W + 2] zero-padded input; wt: [9, C] (tap-major); b: [C].
// out: [B, H/2, W/2, C]; idx: same shape, uint8.
template <int C>
void first_block_forward(const float* __restrict xp, const float* __restrict wt, const float* __restrict b,
                         float* __restrict out, uint8_t* __restrict idx, int64_t B, int64_t H, int64_t W) {
  const int64_t h = H / 2, v = W / 2, Wp = W + 2;
  for (int64_t n = 0; n < B; ++n) {
    const float* x = xp + n * (H + 2) * Wp;
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t u = 0; u < v; ++u) {
        float best[C], arg[C];  // arg as float: one element width keeps the loops vectorised
        for (int k = 0; k < 4; ++k) {
          const float* patch = x + (2 * y + (k >> 1)) * Wp + 2 * u + (k & 1);  // top-left of the 3x3 window
          float acc[C];
          for (int c = 0; c < C; ++c) acc[c] = b[c];
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) {
              const float xv = patch[i * Wp + j];
              const float* wk = wt + (i * 3 + j) * C;
              for (int c = 0; c < C; ++c) acc[c] += xv * wk[c];
            }
          if (k == 0) {
            for (int c = 0; c < C; ++c) { best[c] = acc[c]; arg[c] = 0.f; }
          } else {
            const float kf = static_cast<float>(k);
            for (int c = 0; c < C; ++c) {
              const bool wins = acc[c] > best[c];  // strict: a tie stays with the earlier position
              best[c] = wins ? acc[c] : best[c];
              arg[c] = wins ? kf : arg[c];
            }
          }
        }
        const int64_t o = ((n * h + y) * v + u) * C;
        for (int c = 0; c < C; ++c) {
          const bool alive = best[c] > 0.f;
          out[o + c] = alive ? best[c] : 0.f;
          arg[c] = alive ? arg[c] : 4.f;
        }
        for (int c = 0; c < C; ++c) idx[o + c] = static_cast<uint8_t>(arg[c]);
      }
    }
  }
}

// Weight and bias gradients of first_block_forward. g: [B, H/2, W/2, C]; gw: [9, C]; gb: [C] (zeroed here).
template <int C>
void first_block_backward(const float* __restrict xp, const float* __restrict g, const uint8_t* __restrict idx,
                          float* __restrict gw, float* __restrict gb, int64_t B, int64_t H, int64_t W) {
  const int64_t h = H / 2, v = W / 2, Wp = W + 2;
  double total_w[9][C] = {};  // per-image float sums, added up in double: the order is fixed and the error small
  double total_b[C] = {};
  for (int64_t n = 0; n < B; ++n) {
    float acc_w[9][C] = {};
    float acc_b[C] = {};
    const float* x = xp + n * (H + 2) * Wp;
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t u = 0; u < v; ++u) {
        const int64_t o = ((n * h + y) * v + u) * C;
        float code[C];
        for (int c = 0; c < C; ++c) code[c] = static_cast<float>(idx[o + c]);
        for (int c = 0; c < C; ++c) acc_b[c] += code[c] < 4.f ? g[o + c] : 0.f;
        for (int k = 0; k < 4; ++k) {
          float gk[C];
          const float kf = static_cast<float>(k);
          for (int c = 0; c < C; ++c) gk[c] = code[c] == kf ? g[o + c] : 0.f;
          const float* patch = x + (2 * y + (k >> 1)) * Wp + 2 * u + (k & 1);
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) {
              const float xv = patch[i * Wp + j];
              for (int c = 0; c < C; ++c) acc_w[i * 3 + j][c] += xv * gk[c];
            }
        }
      }
    }
    for (int t = 0; t < 9; ++t)
      for (int c = 0; c < C; ++c) total_w[t][c] += acc_w[t][c];
    for (int c = 0; c < C; ++c) total_b[c] += acc_b[c];
  }
  for (int t = 0; t < 9; ++t)
    for (int c = 0; c < C; ++c) gw[t * C + c] = static_cast<float>(total_w[t][c]);
  for (int c = 0; c < C; ++c) gb[c] = static_cast<float>(total_b[c]);
}

}  // namespace

std::vector<torch::Tensor> first_block_fwd(torch::Tensor xp, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(xp.dim() == 3 && xp.is_contiguous() && xp.scalar_type() == torch::kFloat, "xp: contiguous float [B, H+2, W+2]");
  const int64_t B = xp.size(0), H = xp.size(1) - 2, W = xp.size(2) - 2, C = w.size(0);
  TORCH_CHECK(C == 32 && w.numel() == 9 * C && H % 2 == 0 && W % 2 == 0, "first block: 1 -> 32 channels, 3x3, even sides");
  auto wt = w.reshape({C, 9}).t().contiguous();
  auto bc = b.contiguous();
  auto out = torch::empty({B, H / 2, W / 2, C}, xp.options());
  auto idx = torch::empty({B, H / 2, W / 2, C}, xp.options().dtype(torch::kUInt8));
  first_block_forward<32>(xp.data_ptr<float>(), wt.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
                          idx.data_ptr<uint8_t>(), B, H, W);
  return {out, idx};
}

std::vector<torch::Tensor> first_block_bwd(torch::Tensor xp, torch::Tensor g, torch::Tensor idx) {
  TORCH_CHECK(g.is_contiguous() && idx.is_contiguous() && g.size(3) == 32, "g, idx: contiguous [B, h, v, 32]");
  const int64_t B = xp.size(0), H = xp.size(1) - 2, W = xp.size(2) - 2, C = 32;
  auto gw = torch::empty({9, C}, g.options());
  auto gb = torch::empty({C}, g.options());
  first_block_backward<32>(xp.data_ptr<float>(), g.data_ptr<float>(), idx.data_ptr<uint8_t>(), gw.data_ptr<float>(),
                           gb.data_ptr<float>(), B, H, W);
  return {gw.t().reshape({C, 1, 3, 3}).contiguous(), gb};
}

// relu(max_pool2d(x, 2)) for x NHWC [B, H, W, C] contiguous; out NCHW [B, C, H/2, W/2] contiguous
// (what flatten(1) reads without a copy); idx NHWC [B, H/2, W/2, C] uint8.
std::vector<torch::Tensor> pool_relu_fwd(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 4 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "x: contiguous float NHWC");
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3), h = H / 2, v = W / 2;
  TORCH_CHECK(H % 2 == 0 && W % 2 == 0, "even sides");
  auto out = torch::empty({B, C, h, v}, x.options());
  auto idx = torch::empty({B, h, v, C}, x.options().dtype(torch::kUInt8));
  const float* __restrict xs = x.data_ptr<float>();
  float* __restrict os = out.data_ptr<float>();
  uint8_t* __restrict is = idx.data_ptr<uint8_t>();
  std::vector<float> best_buf(h * v * C), arg_buf(C);  // one image's pooled outputs, channels last
  for (int64_t n = 0; n < B; ++n) {
    for (int64_t y = 0; y < h; ++y)
      for (int64_t u = 0; u < v; ++u) {
        float* __restrict bst = best_buf.data() + (y * v + u) * C;
        float* __restrict arg = arg_buf.data();
        const float* p0 = xs + ((n * H + 2 * y) * W + 2 * u) * C;
        for (int64_t c = 0; c < C; ++c) { bst[c] = p0[c]; arg[c] = 0.f; }
        for (int k = 1; k < 4; ++k) {
          const float* pk = xs + ((n * H + 2 * y + (k >> 1)) * W + 2 * u + (k & 1)) * C;
          const float kf = static_cast<float>(k);
          for (int64_t c = 0; c < C; ++c) {
            const bool wins = pk[c] > bst[c];
            bst[c] = wins ? pk[c] : bst[c];
            arg[c] = wins ? kf : arg[c];
          }
        }
        for (int64_t c = 0; c < C; ++c) {
          const bool alive = bst[c] > 0.f;
          bst[c] = alive ? bst[c] : 0.f;
          arg[c] = alive ? arg[c] : 4.f;
        }
        uint8_t* __restrict id = is + ((n * h + y) * v + u) * C;
        for (int64_t c = 0; c < C; ++c) id[c] = static_cast<uint8_t>(arg[c]);
      }
    float* __restrict o = os + n * C * h * v;  // transpose the image to [C, h * v]
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < h * v; ++p) o[c * h * v + p] = best_buf[p * C + c];
  }
  return {out, idx};
}

// Gradient of pool_relu_fwd: g NCHW [B, C, h, v] contiguous -> NHWC [B, 2h, 2v, C] (every entry written).
torch::Tensor pool_relu_bwd(torch::Tensor g, torch::Tensor idx) {
  TORCH_CHECK(g.is_contiguous() && idx.is_contiguous(), "g NCHW and idx NHWC, contiguous");
  const int64_t B = idx.size(0), h = idx.size(1), v = idx.size(2), C = idx.size(3);
  auto gin = torch::empty({B, 2 * h, 2 * v, C}, g.options());
  const float* __restrict gs = g.data_ptr<float>();
  const uint8_t* __restrict is = idx.data_ptr<uint8_t>();
  float* __restrict out = gin.data_ptr<float>();
  std::vector<float> g_buf(h * v * C), code(C);
  for (int64_t n = 0; n < B; ++n) {
    const float* gp = gs + n * C * h * v;  // transpose the image's gradient to [h * v, C]
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < h * v; ++p) g_buf[p * C + c] = gp[c * h * v + p];
    for (int64_t y = 0; y < h; ++y)
      for (int64_t u = 0; u < v; ++u) {
        const float* __restrict gc = g_buf.data() + (y * v + u) * C;
        const uint8_t* arg = is + ((n * h + y) * v + u) * C;
        float* __restrict cd = code.data();
        for (int64_t c = 0; c < C; ++c) cd[c] = static_cast<float>(arg[c]);
        for (int k = 0; k < 4; ++k) {
          float* __restrict dst = out + ((n * 2 * h + 2 * y + (k >> 1)) * 2 * v + 2 * u + (k & 1)) * C;
          const float kf = static_cast<float>(k);
          for (int64_t c = 0; c < C; ++c) dst[c] = cd[c] == kf ? gc[c] : 0.f;
        }
      }
  }
  return gin;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("first_block_fwd", &first_block_fwd);
  m.def("first_block_bwd", &first_block_bwd);
  m.def("pool_relu_fwd", &pool_relu_fwd);
  m.def("pool_relu_bwd", &pool_relu_bwd);
}
