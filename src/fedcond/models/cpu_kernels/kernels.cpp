// CPU kernels for the paper's CNNs (see __init__.py for why and how they are used).
// Plain C++ with a C interface (no torch headers: a variant compiles in a few seconds); build.py
// compiles it per ISA variant and checks every argument before calling in (ctypes).
// Layouts: "NHWC" = channels-last memory; every kernel runs on one thread (the engine runs one
// single-thread process per core). Max-pooling picks the first maximum in row-major window order
// (position k = 2 * dy + dx), exactly as torch's max_pool2d, NaN included (it wins and survives the
// ReLU); idx holds k, or 4 where the ReLU zeroed the output (no gradient flows).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

// ---- Vector width and register blocking, by the ISA this file is compiled for ----
// W floats per vector; the matrix products keep R x RC vector accumulators (plus RC loads and a
// broadcast) in registers: 32 zmm on AVX-512, 16 ymm on AVX/AVX2, 16 xmm (SSE) or 32 (NEON) in
// the portable build. Wider vectors than the ISA has (64-byte types on AVX2) are split by the
// compiler and spill: 12x slower than stock torch on AVX2 was the cost of that.
#if defined(__AVX512F__)
#define FEDCOND_ISA "avx512"
constexpr int W = 16, R = 7, RC = 2, GR = 4, GC = 4;
#elif defined(__AVX__)
#if defined(__AVX2__)
#define FEDCOND_ISA "avx2"
#else
#define FEDCOND_ISA "avx"
#endif
constexpr int W = 8, R = 6, RC = 2, GR = 4, GC = 2;  // 6 x 2 and 4 x 2: the fastest of 7 blockings timed
#else
#define FEDCOND_ISA "portable"
constexpr int W = 4, R = 6, RC = 2, GR = 4, GC = 2;
#endif
// GR x GC: rows (input channels) x vector columns of the weight-gradient accumulators.

namespace {

typedef float vec __attribute__((vector_size(4 * W)));
typedef float vecu __attribute__((vector_size(4 * W), aligned(4), __may_alias__));  // unaligned, like __m512_u
inline vec ld(const float* p) { return *reinterpret_cast<const vecu*>(p); }
inline void st(float* p, vec v) { *reinterpret_cast<vecu*>(p) = v; }
inline vec splat(float s) { return vec{} + s; }

// One position of a 2x2 max-pool window, channel by channel: z replaces the best so far where it is
// larger or NaN (strict: ties stay earlier; NaN wins, as in max_pool2d); arg keeps the position.
template <int C>
inline void pool_step(float* __restrict best, float* __restrict arg, const float* __restrict z, float kf) {
  for (int c = 0; c < C; ++c) {
    const bool wins = z[c] > best[c] || z[c] != z[c];
    best[c] = wins ? z[c] : best[c];
    arg[c] = wins ? kf : arg[c];
  }
}

// ReLU of a pooled window, stored: out, and idx the window position (4 where the ReLU zeroed it).
template <int C>
inline void relu_store(const float* __restrict best, float* __restrict arg, float* __restrict out,
                       uint8_t* __restrict idx) {
  for (int c = 0; c < C; ++c) {
    const bool alive = !(best[c] <= 0.f);  // NaN stays alive, as in relu
    out[c] = alive ? best[c] : 0.f;
    arg[c] = alive ? arg[c] : 4.f;
  }
  for (int c = 0; c < C; ++c) idx[c] = static_cast<uint8_t>(arg[c]);
}

// relu(max_pool2d(conv2d(x, w, b, padding=1), 2)) for one input channel.
// xp: [B, H + 2, W + 2] zero-padded input; wt: [9, C] (tap-major); b: [C].
// out: [B, H/2, W/2, C]; idx: same shape, uint8.
template <int C>
void first_block_forward(const float* __restrict xp, const float* __restrict wt, const float* __restrict b,
                         float* __restrict out, uint8_t* __restrict idx, int64_t B, int64_t H, int64_t Wd) {
  const int64_t h = H / 2, v = Wd / 2, Wp = Wd + 2;
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
            pool_step<C>(best, arg, acc, static_cast<float>(k));
          }
        }
        const int64_t o = ((n * h + y) * v + u) * C;
        relu_store<C>(best, arg, out + o, idx + o);
      }
    }
  }
}

// Weight and bias gradients of first_block_forward. g: [B, H/2, W/2, C]; gw: [9, C]; gb: [C].
template <int C>
void first_block_backward(const float* __restrict xp, const float* __restrict g, const uint8_t* __restrict idx,
                          float* __restrict gw, float* __restrict gb, int64_t B, int64_t H, int64_t Wd) {
  const int64_t h = H / 2, v = Wd / 2, Wp = Wd + 2;
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

// ---- Conv CI -> CO 3x3 (padding 1) [+ MaxPool 2 + ReLU] by Winograd F(2x2, 3x3) ----
// Each 2x2 output tile is one pooling window, so with POOL the tile's outputs are pooled (first
// maximum in row-major order, then ReLU) straight from the Winograd domain: the conv output is
// never written. Per tile the 4x4 input patch d becomes V = Bt d B; per position xi of the 4x4
// Winograd domain the channels mix by one matrix product, M[xi] = V[xi] U[xi] (U = G w Gt); the
// 2x2 outputs are At M A. 16 products of CI x CO replace 36 multiplies per output tap: 2.25x
// fewer FLOPs than the direct conv. The backward is the exact gradient of this computation.
// Buffers are per image, so they stay in L2.

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
  static constexpr int VI = CI / W, VO = CO / W;
  static constexpr int GCB = GC < VO ? GC : VO;  // weight-gradient vector columns per block
  static_assert(VI % RC == 0 && VO % RC == 0 && VO % GCB == 0 && CI % GR == 0, "blocking must divide the channels");

  // V[xi][t][CI] of one image x [H, Wd, CI] (zero padding 1); rows t >= T (up to Tp) are zero.
  static void input_transform(const float* __restrict x, int64_t H, int64_t Wd, float* __restrict V, int64_t Tp) {
    const int64_t tw = Wd / 2, T = (H / 2) * tw;
    const vec zero = {};
    for (int64_t t = 0; t < Tp; ++t) {
      const int64_t ty = t / tw, tx = t % tw;
      for (int q = 0; q < VI; ++q) {
        vec d[4][4];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) {
            const int64_t y = 2 * ty - 1 + i, c = 2 * tx - 1 + j;
            d[i][j] = (t < T && y >= 0 && y < H && c >= 0 && c < Wd) ? ld(x + (y * Wd + c) * CI + W * q) : zero;
          }
        vec r[4][4];
        for (int j = 0; j < 4; ++j) {
          r[0][j] = d[0][j] - d[2][j];
          r[1][j] = d[1][j] + d[2][j];
          r[2][j] = d[2][j] - d[1][j];
          r[3][j] = d[1][j] - d[3][j];
        }
        for (int i = 0; i < 4; ++i) {
          const vec v[4] = {r[i][0] - r[i][2], r[i][1] + r[i][2], r[i][2] - r[i][1], r[i][1] - r[i][3]};
          for (int j = 0; j < 4; ++j) st(V + ((4 * i + j) * Tp + t) * CI + W * q, v[j]);
        }
      }
    }
  }

  // out[r][NO] = a[r][NK] @ b[NK][NO] for R rows; a row stride NK, b row stride NO, out row stride NO.
  template <int NK, int NO>
  static void rows_times(const float* __restrict a, const float* __restrict b, float* __restrict out) {
    for (int cb = 0; cb < NO / W; cb += RC) {
      vec acc[R][RC] = {};
      for (int k = 0; k < NK; ++k) {
        vec bk[RC];
        for (int j = 0; j < RC; ++j) bk[j] = ld(b + k * NO + W * (cb + j));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const float s = a[r * NK + k];
          for (int j = 0; j < RC; ++j) acc[r][j] += s * bk[j];
        }
      }
      for (int r = 0; r < R; ++r)
        for (int j = 0; j < RC; ++j) st(out + r * NO + W * (cb + j), acc[r][j]);
    }
  }

  // x: [B, H, Wd, CI]; U: [16, CI, CO]; bias: [CO].
  // POOL: out [B, CO, H/2, Wd/2], idx [B, H/2, Wd/2, CO]; otherwise out [B, H, Wd, CO], idx unused.
  static void forward(const float* x, const float* U, const float* bias, float* out, uint8_t* idx,
                      int64_t B, int64_t H, int64_t Wd) {
    const int64_t T = (H / 2) * (Wd / 2), Tp = (T + R - 1) / R * R, tw = Wd / 2;
    // pooled: one image's pooled outputs before the NCHW transpose (the unpooled mode writes out directly)
    std::vector<float> V(16 * Tp * CI), M(16 * R * CO), pooled(POOL ? Tp * CO : 0);
    float arg[CO];
    for (int64_t n = 0; n < B; ++n) {
      input_transform(x + n * H * Wd * CI, H, Wd, V.data(), Tp);
      for (int64_t t0 = 0; t0 < Tp; t0 += R) {
        for (int xi = 0; xi < 16; ++xi)
          rows_times<CI, CO>(V.data() + (xi * Tp + t0) * CI, U + xi * CI * CO, M.data() + xi * R * CO);
        for (int r = 0; r < R && t0 + r < T; ++r) {
          const int64_t t = t0 + r;
          for (int q = 0; q < VO; ++q) {
            const float* m = M.data() + r * CO + W * q;  // m(xi) = M[xi][r][q]
            auto mx = [m](int xi) { return ld(m + xi * R * CO); };
            vec a[2][4];  // At M
            for (int j = 0; j < 4; ++j) {
              a[0][j] = mx(j) + mx(4 + j) + mx(8 + j);
              a[1][j] = mx(4 + j) - mx(8 + j) - mx(12 + j);
            }
            const vec b = ld(bias + W * q);
            const vec y[4] = {a[0][0] + a[0][1] + a[0][2] + b, a[0][1] - a[0][2] - a[0][3] + b,
                              a[1][0] + a[1][1] + a[1][2] + b, a[1][1] - a[1][2] - a[1][3] + b};
            if constexpr (!POOL) {
              for (int k = 0; k < 4; ++k)
                st(out + ((n * H + 2 * (t / tw) + (k >> 1)) * Wd + 2 * (t % tw) + (k & 1)) * CO + W * q, y[k]);
              continue;
            }
            vec best = y[0], code = {};
            for (int k = 1; k < 4; ++k) {
              const auto wins = (y[k] > best) | (y[k] != y[k]);  // strict: ties stay earlier; NaN wins
              best = wins ? y[k] : best;
              code = wins ? splat(static_cast<float>(k)) : code;
            }
            const auto dead = best <= 0.f;  // NaN stays alive, as in relu
            st(pooled.data() + t * CO + W * q, dead ? vec{} : best);
            st(arg + W * q, dead ? splat(4.f) : code);
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

  // g: POOL [B, CO, H/2, Wd/2], otherwise [B, H, Wd, CO]; Ut: [16, CO, CI]. gin: [B, H, Wd, CI]; gU: [16, CI, CO]; gb: [CO].
  static void backward(const float* x, const float* Ut, const float* g, const uint8_t* idx, float* gin,
                       float* gU, float* gb, int64_t B, int64_t H, int64_t Wd) {
    const int64_t T = (H / 2) * (Wd / 2), Tp = (T + R - 1) / R * R, tw = Wd / 2, Wp = Wd + 2;
    std::vector<float> V(16 * Tp * CI), dM(16 * Tp * CO, 0.f), dV(16 * R * CI), gpad((H + 2) * Wp * CI),
        gt(POOL ? Tp * CO : 0, 0.f);  // the pooled gradient, transposed to tiles x channels
    std::fill(gU, gU + 16 * CI * CO, 0.f);
    vec bsum[VO] = {};
    for (int64_t n = 0; n < B; ++n) {
      if constexpr (POOL) {
        const float* gn = g + n * CO * T;
        for (int c = 0; c < CO; ++c)
          for (int64_t t = 0; t < T; ++t) gt[t * CO + c] = gn[c * T + t];
      }
      // dM = A dY At; pooled: dY is the gradient routed to the window's winner (none where ReLU cut)
      for (int64_t t = 0; t < T; ++t) {
        for (int q = 0; q < VO; ++q) {
          vec y[4];
          if constexpr (POOL) {
            const uint8_t* id = idx + (n * T + t) * CO;
            float cf[W];
            for (int c = 0; c < W; ++c) cf[c] = static_cast<float>(id[W * q + c]);
            const vec code = ld(cf), gv = ld(gt.data() + t * CO + W * q), zero = {};
            bsum[q] += code < 4.f ? gv : zero;
            for (int k = 0; k < 4; ++k) y[k] = code == static_cast<float>(k) ? gv : zero;
          } else {
            for (int k = 0; k < 4; ++k) {
              y[k] = ld(g + ((n * H + 2 * (t / tw) + (k >> 1)) * Wd + 2 * (t % tw) + (k & 1)) * CO + W * q);
              bsum[q] += y[k];
            }
          }
          const vec a[4][2] = {{y[0], y[1]}, {y[0] + y[2], y[1] + y[3]}, {y[0] - y[2], y[1] - y[3]}, {-y[2], -y[3]}};
          for (int i = 0; i < 4; ++i) {
            const vec v[4] = {a[i][0], a[i][0] + a[i][1], a[i][0] - a[i][1], -a[i][1]};
            for (int j = 0; j < 4; ++j) st(dM.data() + ((4 * i + j) * Tp + t) * CO + W * q, v[j]);
          }
        }
      }
      // weight gradient: gU[xi] += V[xi]t dM[xi], in blocks of GR input channels x GCB vectors
      input_transform(x + n * H * Wd * CI, H, Wd, V.data(), Tp);
      for (int xi = 0; xi < 16; ++xi) {
        const float* Vx = V.data() + xi * Tp * CI;
        const float* Mx = dM.data() + xi * Tp * CO;
        for (int ci = 0; ci < CI; ci += GR)
          for (int q0 = 0; q0 < VO; q0 += GCB) {
            float* gu = gU + (xi * CI + ci) * CO + W * q0;
            vec acc[GR][GCB];
            for (int r = 0; r < GR; ++r)
              for (int q = 0; q < GCB; ++q) acc[r][q] = ld(gu + r * CO + W * q);
            for (int64_t t = 0; t < T; ++t) {
              vec bm[GCB];
              for (int q = 0; q < GCB; ++q) bm[q] = ld(Mx + t * CO + W * (q0 + q));
              for (int r = 0; r < GR; ++r) {
                const float s = Vx[t * CI + ci + r];
                for (int q = 0; q < GCB; ++q) acc[r][q] += s * bm[q];
              }
            }
            for (int r = 0; r < GR; ++r)
              for (int q = 0; q < GCB; ++q) st(gu + r * CO + W * q, acc[r][q]);
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
            vec e[4][4];
            for (int i = 0; i < 4; ++i)
              for (int j = 0; j < 4; ++j) e[i][j] = ld(dV.data() + ((4 * i + j) * R + r) * CI + W * q);
            vec c[4][4];  // columns: e B^T ... as the transpose of the forward's column step
            for (int i = 0; i < 4; ++i) {
              c[i][0] = e[i][0];
              c[i][1] = e[i][1] - e[i][2] + e[i][3];
              c[i][2] = e[i][1] + e[i][2] - e[i][0];
              c[i][3] = -e[i][3];
            }
            for (int j = 0; j < 4; ++j) {
              const vec d[4] = {c[0][j], c[1][j] - c[2][j] + c[3][j], c[1][j] + c[2][j] - c[0][j], -c[3][j]};
              for (int i = 0; i < 4; ++i) {
                float* p = gpad.data() + ((2 * ty + i) * Wp + 2 * tx + j) * CI + W * q;
                st(p, ld(p) + d[i]);
              }
            }
          }
        }
      }
      float* gn_in = gin + n * H * Wd * CI;
      for (int64_t y = 0; y < H; ++y)
        std::copy(gpad.data() + ((y + 1) * Wp + 1) * CI, gpad.data() + ((y + 1) * Wp + 1 + Wd) * CI, gn_in + y * Wd * CI);
    }
    for (int q = 0; q < VO; ++q) st(gb + W * q, bsum[q]);
  }
};

template <bool FWD, bool POOL>
bool winograd_dispatch(int64_t CI, int64_t CO, const float* x, const float* U, const float* bias_or_g,
                       const uint8_t* idx_in, float* out, uint8_t* idx_out, float* gin, float* gU, float* gb,
                       int64_t B, int64_t H, int64_t Wd) {
#define FEDCOND_WINO(ci, co)                                                                               \
  if (CI == ci && CO == co) {                                                                              \
    if constexpr (FWD) Winograd<ci, co, POOL>::forward(x, U, bias_or_g, out, idx_out, B, H, Wd);           \
    else Winograd<ci, co, POOL>::backward(x, U, bias_or_g, idx_in, gin, gU, gb, B, H, Wd);                 \
    return true;                                                                                           \
  }
  if constexpr (POOL) {
    FEDCOND_WINO(32, 64)
  } else {
    FEDCOND_WINO(32, 32)
    FEDCOND_WINO(32, 64)
    FEDCOND_WINO(64, 64)
    FEDCOND_WINO(64, 128)
  }
#undef FEDCOND_WINO
  return false;
}

// ---- GroupNorm + MaxPool 2 + ReLU on a channels-last input (JDFL's light CNN blocks) ----
// relu(max_pool2d(group_norm(x, G, gamma, beta, eps), 2)) with the normalised image never written:
// a first pass sums each channel (float per row, double per image), then each output is the max of
// its window's x * a[c] + b[c] (a = rstd * gamma, b = beta - mean * a: torch's own form). The
// backward needs the normalised value only where the pool passed the gradient, so its per-channel
// sums run over the pooled positions and one pass writes the input gradient:
// dx = a * dy + c2 * (x - mean) + c3 per group, torch's GroupNorm backward with x centred.
// mean and rstd reach the backward rounded to float (the forward used them in double).

template <int C>
void gn_pool_relu_forward(const float* __restrict x, const float* __restrict gamma, const float* __restrict beta,
                          float* __restrict out, uint8_t* __restrict idx, float* __restrict mean_out,
                          float* __restrict rstd_out, int64_t B, int64_t H, int64_t Wd, int64_t G, double eps) {
  const int64_t h = H / 2, v = Wd / 2, Cg = C / G;
  const double D = static_cast<double>(Cg * H * Wd);
  for (int64_t n = 0; n < B; ++n) {
    const float* xn = x + n * H * Wd * C;
    // sums of (x - shift) and its square, shift the first pixel: near the mean, a one-pass variance
    // keeps its digits (a plain sum of squares loses them where the mean is large against the spread)
    float shift[C];
    for (int c = 0; c < C; ++c) shift[c] = xn[c];
    double s1[C] = {}, s2[C] = {};
    for (int64_t y = 0; y < H; ++y) {
      float a1[C] = {}, a2[C] = {};
      for (int64_t u = 0; u < Wd; ++u) {
        const float* p = xn + (y * Wd + u) * C;
        for (int c = 0; c < C; ++c) {
          const float d = p[c] - shift[c];
          a1[c] += d;
          a2[c] += d * d;
        }
      }
      for (int c = 0; c < C; ++c) { s1[c] += a1[c]; s2[c] += a2[c]; }
    }
    float a[C], b[C];
    const double P = static_cast<double>(H * Wd);  // values per channel
    for (int64_t g = 0; g < G; ++g) {
      double m = 0., q = 0.;  // the group's mean, and its sum of squared deviations
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) m += P * shift[c] + s1[c];  // exact on integer data
      m /= D;
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
        const double mc = shift[c] + s1[c] / P;  // the channel's mean; deviations around it, then between channels
        q += s2[c] - s1[c] * s1[c] / P + P * (mc - m) * (mc - m);
      }
      const double var = std::max(q / D, 0.);
      const double rs = 1. / std::sqrt(var + eps);
      mean_out[n * G + g] = static_cast<float>(m);
      rstd_out[n * G + g] = static_cast<float>(rs);
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
        a[c] = static_cast<float>(rs * gamma[c]);
        b[c] = static_cast<float>(beta[c] - m * rs * gamma[c]);
      }
    }
    for (int64_t y = 0; y < h; ++y)
      for (int64_t u = 0; u < v; ++u) {
        float best[C], arg[C];
        const float* p0 = xn + (2 * y * Wd + 2 * u) * C;
        for (int c = 0; c < C; ++c) { best[c] = p0[c] * a[c] + b[c]; arg[c] = 0.f; }
        for (int k = 1; k < 4; ++k) {
          const float* pk = xn + ((2 * y + (k >> 1)) * Wd + 2 * u + (k & 1)) * C;
          float z[C];
          for (int c = 0; c < C; ++c) z[c] = pk[c] * a[c] + b[c];
          pool_step<C>(best, arg, z, static_cast<float>(k));
        }
        const int64_t o = ((n * h + y) * v + u) * C;
        relu_store<C>(best, arg, out + o, idx + o);
      }
  }
}

// Gradients of gn_pool_relu_forward for g NHWC [B, H/2, W/2, C]: gin NHWC [B, H, W, C], ggamma, gbeta [C].
template <int C>
void gn_pool_relu_backward(const float* __restrict x, const float* __restrict gamma, const float* __restrict g,
                           const uint8_t* __restrict idx, const float* __restrict mean, const float* __restrict rstd,
                           float* __restrict gin, float* __restrict ggamma, float* __restrict gbeta, int64_t B,
                           int64_t H, int64_t Wd, int64_t G) {
  const int64_t h = H / 2, v = Wd / 2, Cg = C / G;
  const double D = static_cast<double>(Cg * H * Wd);
  double tg[C] = {}, tb[C] = {};
  for (int64_t n = 0; n < B; ++n) {
    const float* xn = x + n * H * Wd * C;
    float* gn = gin + n * H * Wd * C;
    // sums over positions of dy * (x - mean) and of dy, dy the pool's gradient (centred: no cancellation)
    double ds[C] = {}, db[C] = {};
    float mc[C];
    for (int c = 0; c < C; ++c) mc[c] = mean[n * G + c / Cg];
    for (int64_t y = 0; y < h; ++y) {
      float a1[C] = {}, a2[C] = {};
      for (int64_t u = 0; u < v; ++u) {
        const int64_t o = ((n * h + y) * v + u) * C;
        float code[C], xs[C] = {};
        for (int c = 0; c < C; ++c) code[c] = static_cast<float>(idx[o + c]);
        for (int k = 0; k < 4; ++k) {
          const float* pk = xn + ((2 * y + (k >> 1)) * Wd + 2 * u + (k & 1)) * C;
          const float kf = static_cast<float>(k);
          for (int c = 0; c < C; ++c) xs[c] = code[c] == kf ? pk[c] : xs[c];
        }
        for (int c = 0; c < C; ++c) {
          const float gv = code[c] < 4.f ? g[o + c] : 0.f;
          a1[c] += gv * (xs[c] - mc[c]);
          a2[c] += gv;
        }
      }
      for (int c = 0; c < C; ++c) { ds[c] += a1[c]; db[c] += a2[c]; }
    }
    float A[C], C2[C], C3[C];
    for (int64_t gi = 0; gi < G; ++gi) {
      const double rs = rstd[n * G + gi];  // the mean enters through mc, the per-channel centres
      double dsg = 0., dbg = 0.;
      for (int64_t c = gi * Cg; c < (gi + 1) * Cg; ++c) { dsg += ds[c] * gamma[c]; dbg += db[c] * gamma[c]; }
      const double c2 = -dsg * rs * rs * rs / D, c3 = -dbg * rs / D;  // dx = A dy + c2 (x - m) + c3
      for (int64_t c = gi * Cg; c < (gi + 1) * Cg; ++c) {
        A[c] = static_cast<float>(rs * gamma[c]);
        C2[c] = static_cast<float>(c2);
        C3[c] = static_cast<float>(c3);
        tg[c] += ds[c] * rs;
        tb[c] += db[c];
      }
    }
    for (int64_t y = 0; y < h; ++y)
      for (int64_t u = 0; u < v; ++u) {
        const int64_t o = ((n * h + y) * v + u) * C;
        float code[C], gv[C];
        for (int c = 0; c < C; ++c) { code[c] = static_cast<float>(idx[o + c]); gv[c] = g[o + c] * A[c]; }
        for (int k = 0; k < 4; ++k) {
          const int64_t q = ((2 * y + (k >> 1)) * Wd + 2 * u + (k & 1)) * C;
          const float kf = static_cast<float>(k);
          for (int c = 0; c < C; ++c) gn[q + c] = (xn[q + c] - mc[c]) * C2[c] + C3[c] + (code[c] == kf ? gv[c] : 0.f);
        }
      }
  }
  for (int c = 0; c < C; ++c) { ggamma[c] = static_cast<float>(tg[c]); gbeta[c] = static_cast<float>(tb[c]); }
}

}  // namespace

// ---- The C interface. Arguments are checked by build.py (shapes, contiguity, dtypes) ----
extern "C" {

const char* fedcond_isa() { return FEDCOND_ISA; }
int fedcond_vector_width() { return W; }

// xp [B, H+2, W+2] zero-padded; w [32, 1, 3, 3]; b [32] -> out, idx [B, H/2, W/2, 32].
void fedcond_first_block_fwd(const float* xp, const float* w, const float* b, float* out, uint8_t* idx,
                             int64_t B, int64_t H, int64_t Wd) {
  float wt[9 * 32];
  for (int c = 0; c < 32; ++c)
    for (int t = 0; t < 9; ++t) wt[t * 32 + c] = w[c * 9 + t];
  first_block_forward<32>(xp, wt, b, out, idx, B, H, Wd);
}

// g [B, H/2, W/2, 32] -> gw [32, 1, 3, 3], gb [32].
void fedcond_first_block_bwd(const float* xp, const float* g, const uint8_t* idx, float* gw, float* gb,
                             int64_t B, int64_t H, int64_t Wd) {
  float gwt[9 * 32];
  first_block_backward<32>(xp, g, idx, gwt, gb, B, H, Wd);
  for (int c = 0; c < 32; ++c)
    for (int t = 0; t < 9; ++t) gw[c * 9 + t] = gwt[t * 32 + c];
}

// relu(max_pool2d(x, 2)) for x NHWC [B, H, W, C]; out NCHW [B, C, H/2, W/2] (what flatten(1) reads
// without a copy); idx NHWC [B, H/2, W/2, C] uint8.
void fedcond_pool_relu_fwd(const float* __restrict xs, float* __restrict os, uint8_t* __restrict is, int64_t B,
                           int64_t H, int64_t Wd, int64_t C) {
  const int64_t h = H / 2, v = Wd / 2;
  std::vector<float> best_buf(h * v * C), arg_buf(C);  // one image's pooled outputs, channels last
  for (int64_t n = 0; n < B; ++n) {
    for (int64_t y = 0; y < h; ++y)
      for (int64_t u = 0; u < v; ++u) {
        float* __restrict bst = best_buf.data() + (y * v + u) * C;
        float* __restrict arg = arg_buf.data();
        const float* p0 = xs + ((n * H + 2 * y) * Wd + 2 * u) * C;
        for (int64_t c = 0; c < C; ++c) { bst[c] = p0[c]; arg[c] = 0.f; }
        for (int k = 1; k < 4; ++k) {
          const float* pk = xs + ((n * H + 2 * y + (k >> 1)) * Wd + 2 * u + (k & 1)) * C;
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
}

// Gradient of fedcond_pool_relu_fwd: g NCHW [B, C, h, v] -> gin NHWC [B, 2h, 2v, C] (every entry written).
void fedcond_pool_relu_bwd(const float* __restrict gs, const uint8_t* __restrict is, float* __restrict out, int64_t B,
                           int64_t h, int64_t v, int64_t C) {
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
}

// relu(max_pool2d(conv2d(x, w, b, padding=1), 2)) for x NHWC [B, H, W, 32], w [64, 32, 3, 3]:
// out NCHW [B, 64, H/2, W/2] (flatten order), idx NHWC [B, H/2, W/2, 64] uint8.
void fedcond_conv_pool_fwd(const float* x, const float* w, const float* b, float* out, uint8_t* idx, int64_t B,
                           int64_t H, int64_t Wd) {
  std::vector<float> U(16 * 32 * 64);
  weight_transform(w, U.data(), nullptr, 32, 64);
  winograd_dispatch<true, true>(32, 64, x, U.data(), b, nullptr, out, idx, nullptr, nullptr, nullptr, B, H, Wd);
}

// Gradients of fedcond_conv_pool_fwd for g NCHW [B, 64, H/2, W/2]: gin NHWC [B, H, W, 32], gw, gb.
void fedcond_conv_pool_bwd(const float* x, const float* w, const float* g, const uint8_t* idx, float* gin, float* gw,
                           float* gb, int64_t B, int64_t H, int64_t Wd) {
  std::vector<float> Ut(16 * 64 * 32), gU(16 * 32 * 64);
  weight_transform(w, nullptr, Ut.data(), 32, 64);
  winograd_dispatch<false, true>(32, 64, x, Ut.data(), g, idx, nullptr, nullptr, gin, gU.data(), gb, B, H, Wd);
  weight_gradient(gU.data(), gw, 32, 64);
}

// conv2d(x, w, b, padding=1) for x NHWC [B, H, W, CI] (even sides), w [CO, CI, 3, 3]: out NHWC
// [B, H, W, CO]. Returns 0, or -1 where (CI, CO) is not one of (32, 32), (32, 64), (64, 64), (64, 128).
int fedcond_winograd_fwd(const float* x, const float* w, const float* b, float* out, int64_t B, int64_t H,
                         int64_t Wd, int64_t CI, int64_t CO) {
  std::vector<float> U(16 * CI * CO);
  weight_transform(w, U.data(), nullptr, CI, CO);
  return winograd_dispatch<true, false>(CI, CO, x, U.data(), b, nullptr, out, nullptr, nullptr, nullptr, nullptr, B,
                                        H, Wd) ? 0 : -1;
}

// Gradients of fedcond_winograd_fwd for g NHWC [B, H, W, CO]: gin NHWC, gw [CO, CI, 3, 3], gb [CO].
int fedcond_winograd_bwd(const float* x, const float* w, const float* g, float* gin, float* gw, float* gb, int64_t B,
                         int64_t H, int64_t Wd, int64_t CI, int64_t CO) {
  std::vector<float> Ut(16 * CO * CI), gU(16 * CI * CO);
  weight_transform(w, nullptr, Ut.data(), CI, CO);
  if (!winograd_dispatch<false, false>(CI, CO, x, Ut.data(), g, nullptr, nullptr, nullptr, gin, gU.data(), gb, B, H,
                                       Wd))
    return -1;
  weight_gradient(gU.data(), gw, CI, CO);
  return 0;
}

// relu(max_pool2d(group_norm(x, G, gamma, beta, eps), 2)) for x NHWC [B, H, W, C] (even sides):
// out, idx NHWC [B, H/2, W/2, C]; mean, rstd [B, G] for the backward. Returns 0, or -1 where C is
// not 32, 64 or 128 or does not split into G groups, or the image is empty.
int fedcond_gn_pool_relu_fwd(const float* x, const float* gamma, const float* beta, float* out, uint8_t* idx,
                             float* mean, float* rstd, int64_t B, int64_t H, int64_t Wd, int64_t C, int64_t G,
                             double eps) {
  if (G <= 0 || C % G || H <= 0 || Wd <= 0) return -1;
  switch (C) {
    case 32: gn_pool_relu_forward<32>(x, gamma, beta, out, idx, mean, rstd, B, H, Wd, G, eps); return 0;
    case 64: gn_pool_relu_forward<64>(x, gamma, beta, out, idx, mean, rstd, B, H, Wd, G, eps); return 0;
    case 128: gn_pool_relu_forward<128>(x, gamma, beta, out, idx, mean, rstd, B, H, Wd, G, eps); return 0;
    default: return -1;
  }
}

// Gradients of fedcond_gn_pool_relu_fwd for g NHWC [B, H/2, W/2, C]: gin NHWC [B, H, W, C], ggamma, gbeta [C].
int fedcond_gn_pool_relu_bwd(const float* x, const float* gamma, const float* g, const uint8_t* idx,
                             const float* mean, const float* rstd, float* gin, float* ggamma, float* gbeta, int64_t B,
                             int64_t H, int64_t Wd, int64_t C, int64_t G) {
  if (G <= 0 || C % G || H <= 0 || Wd <= 0) return -1;
  switch (C) {
    case 32: gn_pool_relu_backward<32>(x, gamma, g, idx, mean, rstd, gin, ggamma, gbeta, B, H, Wd, G); return 0;
    case 64: gn_pool_relu_backward<64>(x, gamma, g, idx, mean, rstd, gin, ggamma, gbeta, B, H, Wd, G); return 0;
    case 128: gn_pool_relu_backward<128>(x, gamma, g, idx, mean, rstd, gin, ggamma, gbeta, B, H, Wd, G); return 0;
    default: return -1;
  }
}

}  // extern "C"
