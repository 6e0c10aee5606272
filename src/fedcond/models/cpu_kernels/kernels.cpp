// CPU kernels for the MNIST CNN's memory-bound stages (see __init__.py for why and how they are used).
// Layouts: "NHWC" = channels-last memory; every kernel runs on one thread (the engine runs one
// single-thread process per core). Max-pooling picks the first maximum in row-major window order
// (position k = 2 * dy + dx), exactly as torch's max_pool2d, NaN included (it wins and survives the
// ReLU); idx holds k, or 4 where the ReLU zeroed the output (no gradient flows).
#include <torch/extension.h>

#include <algorithm>
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
              const bool wins = acc[c] > best[c] || acc[c] != acc[c];  // strict: ties stay earlier; NaN wins
              best[c] = wins ? acc[c] : best[c];
              arg[c] = wins ? kf : arg[c];
            }
          }
        }
        const int64_t o = ((n * h + y) * v + u) * C;
        for (int c = 0; c < C; ++c) {
          const bool alive = !(best[c] <= 0.f);  // NaN stays alive, as in relu
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

// ---- Conv CI -> CO 3x3 (padding 1) + MaxPool 2 + ReLU by Winograd F(2x2, 3x3) ----
// Each 2x2 output tile is one pooling window, so the tile's outputs are pooled (first maximum in
// row-major order, then ReLU) straight from the Winograd domain: the conv output is never written.
// Per tile the 4x4 input patch d becomes V = Bt d B; per position xi of the 4x4 Winograd domain
// the channels mix by one matrix product, M[xi] = V[xi] U[xi] (U = G w Gt, made by the caller);
// the 2x2 outputs are At M A. 16 products of CI x CO replace 36 multiplies per output tap: 2.25x
// fewer FLOPs than the direct conv. The backward is the exact gradient of this computation.
// Buffers are per image, so they stay in L2. Vectors are GCC/Clang vector types: AVX-512 where
// the CPU has it, split by the compiler otherwise.

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4), __may_alias__));  // like immintrin's __m512_u
inline v16 ld(const float* p) { return *reinterpret_cast<const v16u*>(p); }
inline void st(float* p, v16 v) { *reinterpret_cast<v16u*>(p) = v; }

constexpr int R = 7;  // tiles per register block of the matrix products (14 accumulators)
constexpr float G[4][3] = {{1.f, 0.f, 0.f}, {.5f, .5f, .5f}, {.5f, -.5f, .5f}, {0.f, 0.f, 1.f}};

// U = G w Gt for w [CO, CI, 3, 3]: U [16, CI, CO] (used by the forward), Ut [16, CO, CI] (the backward).
void weight_transform(const float* w, float* U, float* Ut, int64_t CI, int64_t CO) {
  for (int64_t co = 0; co < CO; ++co)
    for (int64_t ci = 0; ci < CI; ++ci) {
      const float* k = w + (co * CI + ci) * 9;
      float gk[4][3];
      for (int i = 0; i < 4; ++i)
        for (int b = 0; b < 3; ++b) gk[i][b] = G[i][0] * k[b] + G[i][1] * k[3 + b] + G[i][2] * k[6 + b];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const float u = gk[i][0] * G[j][0] + gk[i][1] * G[j][1] + gk[i][2] * G[j][2];
          if (U) U[((4 * i + j) * CI + ci) * CO + co] = u;
          if (Ut) Ut[((4 * i + j) * CO + co) * CI + ci] = u;
        }
    }
}

// The gradient of weight_transform: gU [16, CI, CO] -> gw [CO, CI, 3, 3] (gw = Gt gU G).
void weight_gradient(const float* gU, float* gw, int64_t CI, int64_t CO) {
  for (int64_t co = 0; co < CO; ++co)
    for (int64_t ci = 0; ci < CI; ++ci) {
      float t[4][3];
      for (int i = 0; i < 4; ++i)
        for (int b = 0; b < 3; ++b) {
          float acc = 0.f;
          for (int j = 0; j < 4; ++j) acc += gU[((4 * i + j) * CI + ci) * CO + co] * G[j][b];
          t[i][b] = acc;
        }
      float* k = gw + (co * CI + ci) * 9;
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) k[3 * a + b] = G[0][a] * t[0][b] + G[1][a] * t[1][b] + G[2][a] * t[2][b] + G[3][a] * t[3][b];
    }
}

// POOL: each tile's 2x2 outputs are max-pooled (+ ReLU) as above; otherwise the conv output is
// written in full (NHWC) for what follows it (the CIFAR CNN's batch norms).
template <int CI, int CO, bool POOL>
struct Winograd {
  static constexpr int VI = CI / 16, VO = CO / 16;

  // V[xi][t][CI] of one image x [H, W, CI] (zero padding 1); rows t >= T (up to Tp) are zero.
  static void input_transform(const float* __restrict x, int64_t H, int64_t W, float* __restrict V, int64_t Tp) {
    const int64_t tw = W / 2, T = (H / 2) * tw;
    const v16 zero = {};
    for (int64_t t = 0; t < Tp; ++t) {
      const int64_t ty = t / tw, tx = t % tw;
      for (int q = 0; q < VI; ++q) {
        v16 d[4][4];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) {
            const int64_t y = 2 * ty - 1 + i, c = 2 * tx - 1 + j;
            d[i][j] = (t < T && y >= 0 && y < H && c >= 0 && c < W) ? ld(x + (y * W + c) * CI + 16 * q) : zero;
          }
        v16 r[4][4];
        for (int j = 0; j < 4; ++j) {
          r[0][j] = d[0][j] - d[2][j];
          r[1][j] = d[1][j] + d[2][j];
          r[2][j] = d[2][j] - d[1][j];
          r[3][j] = d[1][j] - d[3][j];
        }
        for (int i = 0; i < 4; ++i) {
          const v16 v[4] = {r[i][0] - r[i][2], r[i][1] + r[i][2], r[i][2] - r[i][1], r[i][1] - r[i][3]};
          for (int j = 0; j < 4; ++j) st(V + ((4 * i + j) * Tp + t) * CI + 16 * q, v[j]);
        }
      }
    }
  }

  // out[r][NO] = a[r][NK] @ b[NK][NO] for R rows; a row stride NK, b row stride NO, out row stride NO.
  template <int NK, int NO>
  static void rows_times(const float* __restrict a, const float* __restrict b, float* __restrict out) {
    for (int cb = 0; cb < NO / 16; cb += 2) {
      v16 acc[R][2] = {};
      for (int k = 0; k < NK; ++k) {
        const v16 b0 = ld(b + k * NO + 16 * cb), b1 = ld(b + k * NO + 16 * cb + 16);
#pragma GCC unroll 7
        for (int r = 0; r < R; ++r) {
          const float s = a[r * NK + k];
          acc[r][0] += s * b0;
          acc[r][1] += s * b1;
        }
      }
      for (int r = 0; r < R; ++r) {
        st(out + r * NO + 16 * cb, acc[r][0]);
        st(out + r * NO + 16 * cb + 16, acc[r][1]);
      }
    }
  }

  // x: [B, H, W, CI]; U: [16, CI, CO]; bias: [CO].
  // POOL: out [B, CO, H/2, W/2], idx [B, H/2, W/2, CO]; otherwise out [B, H, W, CO], idx unused.
  static void forward(const float* x, const float* U, const float* bias, float* out, uint8_t* idx,
                      int64_t B, int64_t H, int64_t W) {
    const int64_t T = (H / 2) * (W / 2), Tp = (T + R - 1) / R * R, tw = W / 2;
    // pooled: one image's pooled outputs before the NCHW transpose (the unpooled mode writes out directly)
    std::vector<float> V(16 * Tp * CI), M(16 * R * CO), pooled(POOL ? Tp * CO : 0);
    float arg[CO];
    for (int64_t n = 0; n < B; ++n) {
      input_transform(x + n * H * W * CI, H, W, V.data(), Tp);
      for (int64_t t0 = 0; t0 < Tp; t0 += R) {
        for (int xi = 0; xi < 16; ++xi)
          rows_times<CI, CO>(V.data() + (xi * Tp + t0) * CI, U + xi * CI * CO, M.data() + xi * R * CO);
        for (int r = 0; r < R && t0 + r < T; ++r) {
          const int64_t t = t0 + r;
          for (int q = 0; q < VO; ++q) {
            v16 m[16];
            for (int xi = 0; xi < 16; ++xi) m[xi] = ld(M.data() + (xi * R + r) * CO + 16 * q);
            v16 a[2][4];  // At M
            for (int j = 0; j < 4; ++j) {
              a[0][j] = m[j] + m[4 + j] + m[8 + j];
              a[1][j] = m[4 + j] - m[8 + j] - m[12 + j];
            }
            const v16 b = ld(bias + 16 * q);
            const v16 y[4] = {a[0][0] + a[0][1] + a[0][2] + b, a[0][1] - a[0][2] - a[0][3] + b,
                              a[1][0] + a[1][1] + a[1][2] + b, a[1][1] - a[1][2] - a[1][3] + b};
            if constexpr (!POOL) {
              for (int k = 0; k < 4; ++k)
                st(out + ((n * H + 2 * (t / tw) + (k >> 1)) * W + 2 * (t % tw) + (k & 1)) * CO + 16 * q, y[k]);
              continue;
            }
            v16 best = y[0], code = {};
            for (int k = 1; k < 4; ++k) {
              const auto wins = (y[k] > best) | (y[k] != y[k]);  // strict: ties stay earlier; NaN wins
              best = wins ? y[k] : best;
              code = wins ? v16{} + static_cast<float>(k) : code;
            }
            const auto dead = best <= 0.f;  // NaN stays alive, as in relu
            st(pooled.data() + t * CO + 16 * q, dead ? v16{} : best);
            st(arg + 16 * q, dead ? v16{} + 4.f : code);
          }
          if constexpr (POOL) {
            uint8_t* id = idx + (n * T + t) * CO;
            for (int c = 0; c < CO; ++c) id[c] = static_cast<uint8_t>(arg[c]);
          }
        }
      }
      if constexpr (!POOL) continue;
      float* o = out + n * CO * T;  // channels first, what flatten reads
      for (int c = 0; c < CO; ++c)
        for (int64_t t = 0; t < T; ++t) o[c * T + t] = pooled[t * CO + c];
    }
  }

  // g: POOL [B, CO, H/2, W/2], otherwise [B, H, W, CO]; Ut: [16, CO, CI]. gin: [B, H, W, CI]; gU: [16, CI, CO]; gb: [CO].
  static void backward(const float* x, const float* Ut, const float* g, const uint8_t* idx, float* gin,
                       float* gU, float* gb, int64_t B, int64_t H, int64_t W) {
    const int64_t T = (H / 2) * (W / 2), Tp = (T + R - 1) / R * R, tw = W / 2, Wp = W + 2;
    std::vector<float> V(16 * Tp * CI), dM(16 * Tp * CO, 0.f), dV(16 * R * CI), gpad((H + 2) * Wp * CI),
        gt(POOL ? Tp * CO : 0, 0.f);  // the pooled gradient, transposed to tiles x channels
    std::fill(gU, gU + 16 * CI * CO, 0.f);
    v16 bsum[VO] = {};
    for (int64_t n = 0; n < B; ++n) {
      if constexpr (POOL) {
        const float* gn = g + n * CO * T;
        for (int c = 0; c < CO; ++c)
          for (int64_t t = 0; t < T; ++t) gt[t * CO + c] = gn[c * T + t];
      }
      // dM = A dY At; pooled: dY is the gradient routed to the window's winner (none where ReLU cut)
      for (int64_t t = 0; t < T; ++t) {
        for (int q = 0; q < VO; ++q) {
          v16 y[4];
          if constexpr (POOL) {
            const uint8_t* id = idx + (n * T + t) * CO;
            float cf[16];
            for (int c = 0; c < 16; ++c) cf[c] = static_cast<float>(id[16 * q + c]);
            const v16 code = ld(cf), gv = ld(gt.data() + t * CO + 16 * q), zero = {};
            bsum[q] += code < 4.f ? gv : zero;
            for (int k = 0; k < 4; ++k) y[k] = code == static_cast<float>(k) ? gv : zero;
          } else {
            for (int k = 0; k < 4; ++k) {
              y[k] = ld(g + ((n * H + 2 * (t / tw) + (k >> 1)) * W + 2 * (t % tw) + (k & 1)) * CO + 16 * q);
              bsum[q] += y[k];
            }
          }
          const v16 a[4][2] = {{y[0], y[1]}, {y[0] + y[2], y[1] + y[3]}, {y[0] - y[2], y[1] - y[3]}, {-y[2], -y[3]}};
          for (int i = 0; i < 4; ++i) {
            const v16 v[4] = {a[i][0], a[i][0] + a[i][1], a[i][0] - a[i][1], -a[i][1]};
            for (int j = 0; j < 4; ++j) st(dM.data() + ((4 * i + j) * Tp + t) * CO + 16 * q, v[j]);
          }
        }
      }
      // weight gradient: gU[xi] += V[xi]t dM[xi]
      input_transform(x + n * H * W * CI, H, W, V.data(), Tp);
      for (int xi = 0; xi < 16; ++xi) {
        const float* Vx = V.data() + xi * Tp * CI;
        const float* Mx = dM.data() + xi * Tp * CO;
        for (int ci = 0; ci < CI; ci += 4) {
          float* gu = gU + (xi * CI + ci) * CO;
          v16 acc[4][VO];
          for (int r = 0; r < 4; ++r)
            for (int q = 0; q < VO; ++q) acc[r][q] = ld(gu + r * CO + 16 * q);
          for (int64_t t = 0; t < T; ++t) {
            v16 bm[VO];
            for (int q = 0; q < VO; ++q) bm[q] = ld(Mx + t * CO + 16 * q);
            for (int r = 0; r < 4; ++r) {
              const float s = Vx[t * CI + ci + r];
              for (int q = 0; q < VO; ++q) acc[r][q] += s * bm[q];
            }
          }
          for (int r = 0; r < 4; ++r)
            for (int q = 0; q < VO; ++q) st(gu + r * CO + 16 * q, acc[r][q]);
        }
      }
      // input gradient: dV[xi] = dM[xi] Ut[xi], then d = B dV Bt added into the padded image
      std::fill(gpad.begin(), gpad.end(), 0.f);
      for (int64_t t0 = 0; t0 < Tp; t0 += R) {
        for (int xi = 0; xi < 16; ++xi)
          rows_times<CO, CI>(dM.data() + (xi * Tp + t0) * CO, Ut + xi * CO * CI, dV.data() + xi * R * CI);
        for (int r = 0; r < R && t0 + r < T; ++r) {
          const int64_t t = t0 + r, ty = t / tw, tx = t % tw;
          for (int q = 0; q < VI; ++q) {
            v16 e[4][4];
            for (int i = 0; i < 4; ++i)
              for (int j = 0; j < 4; ++j) e[i][j] = ld(dV.data() + ((4 * i + j) * R + r) * CI + 16 * q);
            v16 c[4][4];  // columns: e B^T ... as the transpose of the forward's column step
            for (int i = 0; i < 4; ++i) {
              c[i][0] = e[i][0];
              c[i][1] = e[i][1] - e[i][2] + e[i][3];
              c[i][2] = e[i][1] + e[i][2] - e[i][0];
              c[i][3] = -e[i][3];
            }
            for (int j = 0; j < 4; ++j) {
              const v16 d[4] = {c[0][j], c[1][j] - c[2][j] + c[3][j], c[1][j] + c[2][j] - c[0][j], -c[3][j]};
              for (int i = 0; i < 4; ++i) {
                float* p = gpad.data() + ((2 * ty + i) * Wp + 2 * tx + j) * CI + 16 * q;
                st(p, ld(p) + d[i]);
              }
            }
          }
        }
      }
      float* gn_in = gin + n * H * W * CI;
      for (int64_t y = 0; y < H; ++y)
        std::copy(gpad.data() + ((y + 1) * Wp + 1) * CI, gpad.data() + ((y + 1) * Wp + 1 + W) * CI, gn_in + y * W * CI);
    }
    for (int q = 0; q < VO; ++q) st(gb + 16 * q, bsum[q]);
  }
};

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
            const bool wins = pk[c] > bst[c] || pk[c] != pk[c];
            bst[c] = wins ? pk[c] : bst[c];
            arg[c] = wins ? kf : arg[c];
          }
        }
        for (int64_t c = 0; c < C; ++c) {
          const bool alive = !(bst[c] <= 0.f);
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

// relu(max_pool2d(conv2d(x, w, b, padding=1), 2)) for x NHWC [B, H, W, 32], w [64, 32, 3, 3]:
// out NCHW [B, 64, H/2, W/2] (flatten order), idx NHWC [B, H/2, W/2, 64] uint8.
std::vector<torch::Tensor> conv_pool_fwd(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.dim() == 4 && x.is_contiguous() && x.scalar_type() == torch::kFloat && x.size(3) == 32,
              "x: contiguous float NHWC with 32 channels");
  TORCH_CHECK(w.sizes() == torch::IntArrayRef({64, 32, 3, 3}) && b.sizes() == torch::IntArrayRef({64}) && w.is_cpu() &&
              b.is_cpu() && x.is_cpu(), "CPU tensors; w: [64, 32, 3, 3]; b: [64]");
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2);
  TORCH_CHECK(H % 2 == 0 && W % 2 == 0, "even sides");
  auto out = torch::empty({B, 64, H / 2, W / 2}, x.options());
  auto idx = torch::empty({B, H / 2, W / 2, 64}, x.options().dtype(torch::kUInt8));
  auto wc = w.contiguous(), bc = b.contiguous();
  std::vector<float> U(16 * 32 * 64);
  weight_transform(wc.data_ptr<float>(), U.data(), nullptr, 32, 64);
  Winograd<32, 64, true>::forward(x.data_ptr<float>(), U.data(), bc.data_ptr<float>(), out.data_ptr<float>(),
                            idx.data_ptr<uint8_t>(), B, H, W);
  return {out, idx};
}

// Gradients of conv_pool_fwd for g NCHW [B, 64, H/2, W/2]: input NHWC [B, H, W, 32], weight, bias.
std::vector<torch::Tensor> conv_pool_bwd(torch::Tensor x, torch::Tensor w, torch::Tensor g, torch::Tensor idx) {
  TORCH_CHECK(x.dim() == 4 && x.size(3) == 32 && x.is_contiguous() && x.is_cpu() && x.scalar_type() == torch::kFloat,
              "x: contiguous float NHWC with 32 channels");
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2);
  TORCH_CHECK(w.sizes() == torch::IntArrayRef({64, 32, 3, 3}) && w.is_cpu(), "w: [64, 32, 3, 3]");
  TORCH_CHECK(g.sizes() == torch::IntArrayRef({B, 64, H / 2, W / 2}) && g.is_contiguous() && g.is_cpu(), "g: [B, 64, H/2, W/2]");
  TORCH_CHECK(idx.sizes() == torch::IntArrayRef({B, H / 2, W / 2, 64}) && idx.is_contiguous() && idx.is_cpu() &&
              idx.scalar_type() == torch::kUInt8, "idx: uint8 [B, H/2, W/2, 64]");
  auto gin = torch::empty_like(x);
  auto gw = torch::empty({64, 32, 3, 3}, x.options());
  auto gb = torch::empty({64}, x.options());
  auto wc = w.contiguous();
  std::vector<float> Ut(16 * 64 * 32), gU(16 * 32 * 64);
  weight_transform(wc.data_ptr<float>(), nullptr, Ut.data(), 32, 64);
  Winograd<32, 64, true>::backward(x.data_ptr<float>(), Ut.data(), g.data_ptr<float>(), idx.data_ptr<uint8_t>(),
                             gin.data_ptr<float>(), gU.data(), gb.data_ptr<float>(), B, H, W);
  weight_gradient(gU.data(), gw.data_ptr<float>(), 32, 64);
  return {gin, gw, gb};
}

// conv2d(x, w, b, padding=1) by Winograd F(2x2, 3x3) for x NHWC [B, H, W, CI] (even sides),
// w [CO, CI, 3, 3], (CI, CO) in {(32, 32), (32, 64), (64, 64)}: out NHWC [B, H, W, CO].
template <bool FWD>
void dense_dispatch(int64_t CI, int64_t CO, const float* x, const float* W8, const float* bias_or_g, float* out,
                    float* gin, float* gU, float* gb, int64_t B, int64_t H, int64_t W) {
#define FEDCOND_WINO(ci, co)                                                                            \
  if (CI == ci && CO == co) {                                                                           \
    if constexpr (FWD) Winograd<ci, co, false>::forward(x, W8, bias_or_g, out, nullptr, B, H, W);       \
    else Winograd<ci, co, false>::backward(x, W8, bias_or_g, nullptr, gin, gU, gb, B, H, W);            \
    return;                                                                                             \
  }
  FEDCOND_WINO(32, 32)
  FEDCOND_WINO(32, 64)
  FEDCOND_WINO(64, 64)
#undef FEDCOND_WINO
  TORCH_CHECK(false, "Winograd conv: no kernel for ", CI, " -> ", CO, " channels");
}

void check_conv_args(const torch::Tensor& x, const torch::Tensor& w) {
  TORCH_CHECK(x.dim() == 4 && x.is_contiguous() && x.is_cpu() && x.scalar_type() == torch::kFloat &&
              x.size(1) % 2 == 0 && x.size(2) % 2 == 0, "x: contiguous float NHWC on the CPU, even sides");
  TORCH_CHECK(w.dim() == 4 && w.size(1) == x.size(3) && w.size(2) == 3 && w.size(3) == 3 && w.is_cpu() &&
              w.scalar_type() == torch::kFloat, "w: [CO, CI, 3, 3] float on the CPU");
}

torch::Tensor winograd_conv_fwd(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  check_conv_args(x, w);
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2), CI = x.size(3), CO = w.size(0);
  TORCH_CHECK(b.sizes() == torch::IntArrayRef({CO}) && b.is_cpu() && b.scalar_type() == torch::kFloat, "b: [CO]");
  auto out = torch::empty({B, H, W, CO}, x.options());
  auto wc = w.contiguous(), bc = b.contiguous();
  std::vector<float> U(16 * CI * CO);
  weight_transform(wc.data_ptr<float>(), U.data(), nullptr, CI, CO);
  dense_dispatch<true>(CI, CO, x.data_ptr<float>(), U.data(), bc.data_ptr<float>(), out.data_ptr<float>(), nullptr,
                       nullptr, nullptr, B, H, W);
  return out;
}

// Gradients of winograd_conv_fwd for g NHWC [B, H, W, CO]: input NHWC, weight, bias.
std::vector<torch::Tensor> winograd_conv_bwd(torch::Tensor x, torch::Tensor w, torch::Tensor g) {
  check_conv_args(x, w);
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2), CI = x.size(3), CO = w.size(0);
  TORCH_CHECK(g.sizes() == torch::IntArrayRef({B, H, W, CO}) && g.is_contiguous() && g.is_cpu() &&
              g.scalar_type() == torch::kFloat, "g: contiguous float [B, H, W, CO]");
  auto gin = torch::empty_like(x);
  auto gw = torch::empty({CO, CI, 3, 3}, x.options());
  auto gb = torch::empty({CO}, x.options());
  auto wc = w.contiguous();
  std::vector<float> Ut(16 * CO * CI), gU(16 * CI * CO);
  weight_transform(wc.data_ptr<float>(), nullptr, Ut.data(), CI, CO);
  dense_dispatch<false>(CI, CO, x.data_ptr<float>(), Ut.data(), g.data_ptr<float>(), nullptr, gin.data_ptr<float>(),
                        gU.data(), gb.data_ptr<float>(), B, H, W);
  weight_gradient(gU.data(), gw.data_ptr<float>(), CI, CO);
  return {gin, gw, gb};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("winograd_conv_fwd", &winograd_conv_fwd);
  m.def("winograd_conv_bwd", &winograd_conv_bwd);
  m.def("conv_pool_fwd", &conv_pool_fwd);
  m.def("conv_pool_bwd", &conv_pool_bwd);
  m.def("first_block_fwd", &first_block_fwd);
  m.def("first_block_bwd", &first_block_bwd);
  m.def("pool_relu_fwd", &pool_relu_fwd);
  m.def("pool_relu_bwd", &pool_relu_bwd);
}
