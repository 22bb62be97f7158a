"""The OpenCL C of the sampling kernels (``backends/opencl/kernels/sampling.py``): GridSample's
taps, forward and gradients; DeformConv's sampled columns; RoiAlign; MaxRoiPool. Programs
define ``T`` (the data's type), ``G`` (the grid's) and ``R`` (the type positions are computed
in) before this text.
"""

TAPS = """
/* Reflect x (outside [lo, hi]) by the borders until inside; *sign = d(result)/dx. */
inline R reflect_(const R x, const R lo, const R hi, R* sign) {
  const R span = hi - lo;
  if (span <= (R)0) { *sign = (R)0; return lo; }
  const int below = x < lo;
  const R dist = below ? lo - x : x - hi;
  const R flips = floor(dist / span);
  const R rest = dist - flips * span;
  const int even = fmod(flips, (R)2) == (R)0;
  *sign = even ? (R)-1 : (R)1;
  if (below) return even ? lo + rest : hi - rest;
  return even ? hi - rest : lo + rest;
}

/* The input index an integer position reads (-1: zeros padding, outside). */
inline int pixel(const int i, const int L, const int padding, const R lo, const R hi) {
  if (padding == 0) return i >= 0 && i < L ? i : -1;
  if (padding == 1 || (i >= lo && i <= hi)) return clamp(i, 0, L - 1);
  R sign;
  return clamp((int)reflect_((R)i, lo, hi, &sign), 0, L - 1);
}

/* The taps of one axis of length L at normalised coordinate nrm (mode 0 linear, 1 nearest,
   2 cubic; padding 0 zeros, 1 border, 2 reflection): input indices, weights and the weights'
   derivatives with respect to nrm. Returns the tap count. */
inline int axis_taps(const R nrm, const int L, const int mode, const int padding,
                     const int align, int* idx, R* w, R* dw) {
  R x, scale, lo, hi;
  if (align) {
    x = (nrm + (R)1) / (R)2 * (R)(L - 1); scale = (R)(L - 1) / (R)2; lo = (R)0; hi = (R)(L - 1);
  } else {
    x = ((nrm + (R)1) * (R)L - (R)1) / (R)2; scale = (R)L / (R)2; lo = (R)-0.5;
    hi = (R)L - (R)0.5;
  }
  if (mode == 1) x = rint(x);  /* half to even, as PyTorch rounds */
  R slope = scale;
  if (x < lo || x > hi) {
    if (padding == 1) { x = clamp(x, (R)0, (R)(L - 1)); slope = (R)0; }
    else if (padding == 2) { R sign; x = reflect_(x, lo, hi, &sign); slope *= sign; }
  }
  if (mode == 1) {
    idx[0] = pixel((int)x, L, padding, lo, hi); w[0] = (R)1; dw[0] = (R)0;
    return 1;
  }
  const R f = floor(x), t = x - f;
  const int base = (int)f;
  if (mode == 0) {
    idx[0] = pixel(base, L, padding, lo, hi); idx[1] = pixel(base + 1, L, padding, lo, hi);
    w[0] = (R)1 - t; w[1] = t; dw[0] = -slope; dw[1] = slope;
    return 2;
  }
  const R a = (R)(CUBIC_A), u = t + (R)1, s = (R)1 - t, v = (R)2 - t;
  w[0] = ((a * u - (R)5 * a) * u + (R)8 * a) * u - (R)4 * a;
  w[1] = ((a + (R)2) * t - (a + (R)3)) * t * t + (R)1;
  w[2] = ((a + (R)2) * s - (a + (R)3)) * s * s + (R)1;
  w[3] = ((a * v - (R)5 * a) * v + (R)8 * a) * v - (R)4 * a;
  dw[0] = slope * (((R)3 * a * u - (R)10 * a) * u + (R)8 * a);
  dw[1] = slope * (((R)3 * (a + (R)2) * t - (R)2 * (a + (R)3)) * t);
  dw[2] = -slope * (((R)3 * (a + (R)2) * s - (R)2 * (a + (R)3)) * s);
  dw[3] = -slope * (((R)3 * a * v - (R)10 * a) * v + (R)8 * a);
  for (int k = 0; k < 4; ++k) idx[k] = pixel(base - 1 + k, L, padding, lo, hi);
  return 4;
}

/* Every axis's taps of grid point p of image n; returns the number of tap combinations. */
inline int point_taps(__global const G* grid, const int g_off, const int n, const int p,
                      const int P, const int dims, const int4 size, const int mode,
                      const int padding, const int align, int idx[3][4], R w[3][4],
                      R dw[3][4], int* count, int* stride) {
  const int sizes[3] = {size.s0, size.s1, size.s2};
  int combos = 1, step = 1;
  for (int d = dims - 1; d >= 0; --d) {
    const R nrm = (R)grid[g_off + (n * P + p) * dims + dims - 1 - d];  /* (x, y, z) order */
    count[d] = axis_taps(nrm, sizes[d], mode, padding, align, idx[d], w[d], dw[d]);
    stride[d] = step;
    step *= sizes[d];
    combos *= count[d];
  }
  return combos;
}

/* Combination k of the taps: its flat input index (-1 if it reads padding) and the indices of
   the tap chosen on each axis. */
inline int combo(const int k, const int dims, int idx[3][4], const int* count,
                 const int* stride, int* pick) {
  int rest = k, flat = 0;
  for (int d = dims - 1; d >= 0; --d) {
    pick[d] = rest % count[d];
    rest /= count[d];
    if (idx[d][pick[d]] < 0) return -1;
    flat += idx[d][pick[d]] * stride[d];
  }
  return flat;
}
"""

GRID_SAMPLE = """
#define TAPS_OF(i_n, i_p) \\
  int idx[3][4], count[3], stride[3], pick[3]; R w[3][4], dw[3][4]; \\
  const int combos = point_taps(grid, g_off, i_n, i_p, P, dims, size, mode, padding, align, \\
                                idx, w, dw, count, stride);

__kernel void grid_sample(const int total, const int C, const int P, const int S,
                          const int dims, const int4 size, const int mode, const int padding,
                          const int align, __global const T* x, const int x_off,
                          __global const G* grid, const int g_off, __global T* y,
                          const int y_off) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int p = i % P, nc = i / P, n = nc / C;
  TAPS_OF(n, p)
  T acc = 0;
  for (int k = 0; k < combos; ++k) {
    const int flat = combo(k, dims, idx, count, stride, pick);
    if (flat < 0) continue;
    T weight = 1;
    for (int d = 0; d < dims; ++d) weight *= (T)w[d][pick[d]];
    acc += weight * x[x_off + nc * S + flat];
  }
  y[y_off + i] = acc;
}

/* dX: each (image, channel, point) adds dY times its weights into the inputs it read. */
__kernel void grid_sample_dx(const int total, const int C, const int P, const int S,
                             const int dims, const int4 size, const int mode,
                             const int padding, const int align, __global const T* dy,
                             const int dy_off, __global const G* grid, const int g_off,
                             __global T* dx, const int dx_off) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int p = i % P, nc = i / P, n = nc / C;
  TAPS_OF(n, p)
  const T g = dy[dy_off + i];
  for (int k = 0; k < combos; ++k) {
    const int flat = combo(k, dims, idx, count, stride, pick);
    if (flat < 0) continue;
    T weight = 1;
    for (int d = 0; d < dims; ++d) weight *= (T)w[d][pick[d]];
    atomic_add_t(dx + dx_off + nc * S + flat, g * weight);
  }
}

/* dgrid: per (image, point), over channels and taps, dY times the input read times the
   derivative of the tap's weight along each axis. */
__kernel void grid_sample_dgrid(const int total, const int C, const int P, const int S,
                                const int dims, const int4 size, const int mode,
                                const int padding, const int align, __global const T* dy,
                                const int dy_off, __global const T* x, const int x_off,
                                __global const G* grid, const int g_off, __global G* dgrid,
                                const int dg_off) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int p = i % P, n = i / P;
  TAPS_OF(n, p)
  T acc[3] = {0, 0, 0};
  for (int k = 0; k < combos; ++k) {
    const int flat = combo(k, dims, idx, count, stride, pick);
    if (flat < 0) continue;
    T seen = 0;
    for (int c = 0; c < C; ++c)
      seen += dy[dy_off + (n * C + c) * P + p] * x[x_off + (n * C + c) * S + flat];
    for (int d = 0; d < dims; ++d) {
      T part = (T)dw[d][pick[d]];
      for (int e = 0; e < dims; ++e)
        if (e != d) part *= (T)w[e][pick[e]];
      acc[d] += seen * part;
    }
  }
  for (int d = 0; d < dims; ++d) dgrid[dg_off + i * dims + dims - 1 - d] = (G)acc[d];
}
"""

ATOMIC = {
    "float": """
inline void atomic_add_t(volatile __global float* p, const float v) {
  union { unsigned int u; float f; } old, next;
  do { old.f = *p; next.f = old.f + v; }
  while (atomic_cmpxchg((volatile __global unsigned int*)p, old.u, next.u) != old.u);
}
""",
    "double": """
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
inline void atomic_add_t(volatile __global double* p, const double v) {
  union { unsigned long u; double f; } old, next;
  do { old.f = *p; next.f = old.f + v; }
  while (atom_cmpxchg((volatile __global unsigned long*)p, old.u, next.u) != old.u);
}
"""}

REGIONS = """
/* DeformConv's columns cols[n, c, k, p]: x[n, c] sampled (N-linearly, zeros outside) at
   window p's kernel offset k moved by its offset, times its mask. */
__kernel void deform_columns(const int total, const int C, const int K, const int P,
                             const int groups, const int dims, const int4 size,
                             const int4 kern, const int4 outs, const int4 strides,
                             const int4 dil, const int4 head, const int has_mask,
                             __global const T* x, const int x_off, __global const T* offset,
                             const int o_off, __global const T* mask, const int m_off,
                             __global T* cols, const int c_off) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int p = i % P, k = (i / P) % K, c = (i / (P * K)) % C, n = i / (P * K * C);
  const int g = c / (C / groups), block = (n * groups + g) * K + k;
  const int L[3] = {size.s0, size.s1, size.s2}, KS[3] = {kern.s0, kern.s1, kern.s2};
  const int OS[3] = {outs.s0, outs.s1, outs.s2}, ST[3] = {strides.s0, strides.s1, strides.s2};
  const int DL[3] = {dil.s0, dil.s1, dil.s2}, HD[3] = {head.s0, head.s1, head.s2};
  R pos[3];
  int kr = k, pr = p, S = 1;
  for (int d = dims - 1; d >= 0; --d) {
    const int kd = kr % KS[d], od = pr % OS[d];
    kr /= KS[d];
    pr /= OS[d];
    pos[d] = (R)(od * ST[d] - HD[d] + kd * DL[d])
             + (R)offset[o_off + (block * dims + d) * P + p];
    S *= L[d];
  }
  R acc = 0;
  for (int corner = 0; corner < (1 << dims); ++corner) {
    R weight = 1;
    int flat = 0, step = 1, inside = 1;
    for (int d = dims - 1; d >= 0; --d) {
      const R at = floor(pos[d]) + (R)((corner >> (dims - 1 - d)) & 1);
      const int j = (int)at;
      inside = inside && j >= 0 && j < L[d];
      weight *= (R)1 - fabs(pos[d] - at);
      flat += j * step;
      step *= L[d];
    }
    if (inside) acc += weight * (R)x[x_off + (n * C + c) * S + flat];
  }
  if (has_mask) acc *= (R)mask[m_off + block * P + p];
  cols[c_off + i] = (T)acc;
}

/* RoiAlign, one output (roi, channel, ph, pw) per work-item, as onnx.reference computes it:
   bilinear samples on a (gh, gw) grid per bin, averaged, or in max mode the largest of any
   sample's four weighted corners. */
__kernel void roi_align(const int total, const int C, const int H, const int W, const int OH,
                        const int OW, const R scale, const int ratio, const int half_pixel,
                        const int max_mode, __global const T* x, const int x_off,
                        __global const T* rois, const int r_off, __global const long* batch,
                        const int b_off, __global T* y, const int y_off) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int pw = i % OW, ph = (i / OW) % OH, c = (i / (OW * OH)) % C, r = i / (OW * OH * C);
  const R shift = half_pixel ? (R)0.5 : (R)0;
  __global const T* roi = rois + r_off + 4 * r;
  const R x1 = (R)roi[0] * scale - shift, y1 = (R)roi[1] * scale - shift;
  R rw = (R)roi[2] * scale - shift - x1, rh = (R)roi[3] * scale - shift - y1;
  if (!half_pixel) { rw = fmax(rw, (R)1); rh = fmax(rh, (R)1); }
  const R bh = rh / (R)OH, bw = rw / (R)OW;
  const int gh = ratio > 0 ? ratio : (int)ceil(rh / (R)OH);
  const int gw = ratio > 0 ? ratio : (int)ceil(rw / (R)OW);
  __global const T* plane = x + x_off + (batch[b_off + r] * C + c) * H * W;
  R acc = 0;
  int started = 0;
  for (int iy = 0; iy < gh; ++iy) {
    R yy = y1 + (R)ph * bh + ((R)iy + (R)0.5) * bh / (R)gh;
    for (int ix = 0; ix < gw; ++ix) {
      R xx = x1 + (R)pw * bw + ((R)ix + (R)0.5) * bw / (R)gw;
      R v = 0;
      if (!(yy < (R)-1 || yy > (R)H || xx < (R)-1 || xx > (R)W)) {
        R sy = fmax(yy, (R)0), sx = fmax(xx, (R)0);
        int yl = (int)sy, xl = (int)sx, yh, xh;
        if (yl >= H - 1) { yh = yl = H - 1; sy = (R)yl; } else { yh = yl + 1; }
        if (xl >= W - 1) { xh = xl = W - 1; sx = (R)xl; } else { xh = xl + 1; }
        const R ly = sy - (R)yl, lx = sx - (R)xl, hy = (R)1 - ly, hx = (R)1 - lx;
        const R a1 = hy * hx * (R)plane[yl * W + xl], a2 = hy * lx * (R)plane[yl * W + xh];
        const R a3 = ly * hx * (R)plane[yh * W + xl], a4 = ly * lx * (R)plane[yh * W + xh];
        v = max_mode ? fmax(fmax(a1, a2), fmax(a3, a4)) : a1 + a2 + a3 + a4;
      }
      acc = max_mode ? (started ? fmax(acc, v) : v) : acc + v;
      started = 1;
    }
  }
  if (!max_mode) acc /= (R)max(gh * gw, 1);
  y[y_off + i] = (T)acc;
}

/* MaxRoiPool (Caffe's ROIPooling): one output (roi, channel, ph, pw) per work-item, the
   maximum of its bin; an empty bin gives 0. */
__kernel void max_roi_pool(const int total, const int C, const int H, const int W,
                           const int PH, const int PW, const R scale,
                           __global const T* x, const int x_off, __global const T* rois,
                           const int r_off, __global T* y, const int y_off) {
  const int i = get_global_id(0);
  if (i >= total) return;
  const int pw = i % PW, ph = (i / PW) % PH, c = (i / (PW * PH)) % C, r = i / (PW * PH * C);
  __global const T* roi = rois + r_off + 5 * r;
  const int b = (int)roi[0];
  const int x1 = (int)round((R)roi[1] * scale), y1 = (int)round((R)roi[2] * scale);
  const int x2 = (int)round((R)roi[3] * scale), y2 = (int)round((R)roi[4] * scale);
  const int rh = max(y2 - y1 + 1, 1), rw = max(x2 - x1 + 1, 1);
  const int h0 = clamp(ph * rh / PH + y1, 0, H);
  const int h1 = clamp(((ph + 1) * rh + PH - 1) / PH + y1, 0, H);  /* ceil */
  const int w0 = clamp(pw * rw / PW + x1, 0, W);
  const int w1 = clamp(((pw + 1) * rw + PW - 1) / PW + x1, 0, W);
  __global const T* plane = x + x_off + (b * C + c) * H * W;
  T best = 0;
  int started = 0;
  for (int h = h0; h < h1; ++h)
    for (int w = w0; w < w1; ++w) {
      const T v = plane[h * W + w];
      if (!started || v > best) { best = v; started = 1; }
    }
  y[y_off + i] = best;
}
"""
