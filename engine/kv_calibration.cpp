#include "engine/kv_calibration.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "errors/error.h"
#include "kv/block_pool.h"
#include "kv/kv_presets.h"

namespace tq {

std::vector<int> outlier_order(const std::vector<double>& energy, bool pairs, RopePairing pairing) {
  const int d = static_cast<int>(energy.size());
  std::vector<char> outlier(d, 0);
  if (pairs) {
    // Pair p holds channels (p, p + d/2) (Half) or (2p, 2p + 1) (Adjacent).
    auto members = [&](int p) {
      return pairing == RopePairing::Half ? std::pair{p, p + d / 2} : std::pair{2 * p, 2 * p + 1};
    };
    std::vector<int> ids(d / 2);
    std::iota(ids.begin(), ids.end(), 0);
    std::vector<double> pe(d / 2);
    for (int p = 0; p < d / 2; ++p) pe[p] = energy[members(p).first] + energy[members(p).second];
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return pe[a] > pe[b]; });
    for (int i = 0; i < d / 4; ++i) {
      outlier[members(ids[i]).first] = 1;
      outlier[members(ids[i]).second] = 1;
    }
    // d/2 odd (d % 4 == 2): top up the outlier half with the strongest remaining channel.
    int count = 2 * (d / 4);
    for (int i = d / 4; count < d / 2 && i < d / 2; ++i) {
      const auto [a, b] = members(ids[i]);
      const int pick = energy[a] >= energy[b] ? a : b;
      outlier[pick] = 1;
      ++count;
    }
  } else {
    std::vector<int> ids(d);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return energy[a] > energy[b]; });
    for (int i = 0; i < d / 2; ++i) outlier[ids[i]] = 1;
  }
  std::vector<int> order;
  for (int j = 0; j < d; ++j)
    if (outlier[j]) order.push_back(j);
  for (int j = 0; j < d; ++j)
    if (!outlier[j]) order.push_back(j);
  return order;
}

namespace {
// Averages each RoPE pair's two channels (their energies mix as the position turns the pair).
std::vector<double> pair_average(const std::vector<double>& e, RopePairing pairing) {
  const int d = static_cast<int>(e.size());
  std::vector<double> out(e);
  for (int p = 0; p < d / 2; ++p) {
    const int a = pairing == RopePairing::Half ? p : 2 * p;
    const int b = pairing == RopePairing::Half ? p + d / 2 : 2 * p + 1;
    out[a] = out[b] = 0.5 * (e[a] + e[b]);
  }
  return out;
}
}  // namespace

std::vector<float> key_scale(const std::vector<double>& key_var, const std::vector<double>& query_energy,
                             RopePairing pairing) {
  const int d = static_cast<int>(key_var.size());
  const std::vector<double> kv = pair_average(key_var, pairing), qe = pair_average(query_energy, pairing);
  double kmax = 0, qmax = 0;
  for (int j = 0; j < d; ++j) kmax = std::max(kmax, kv[j]), qmax = std::max(qmax, qe[j]);
  std::vector<double> log_s(d);
  double mean = 0;
  for (int j = 0; j < d; ++j) {
    const double k = std::max(kv[j], 1e-12 * kmax + 1e-30), q = std::max(qe[j], 1e-12 * qmax + 1e-30);
    log_s[j] = 0.25 * std::log(k / q);
    mean += log_s[j] / d;
  }
  std::vector<float> s(d);
  const double bound = std::log(1e3);
  for (int j = 0; j < d; ++j) s[j] = static_cast<float>(std::exp(std::clamp(log_s[j] - mean, -bound, bound)));
  return s;
}

std::vector<ChannelCoding> channel_codings(const std::vector<std::vector<ChannelSpectrum>>& spectra, int bits) {
  std::vector<ChannelCoding> out;
  for (const std::vector<ChannelSpectrum>& layer : spectra) out.push_back(channel_coding(layer, bits));
  return out;
}

namespace {

// Channel spectra of one layer. rows_k, rows_v: [n][H*d] as the quantizer sees them (affine map
// applied); queries: [n][num_heads*d] times the key scale. Key rows are weighted by the attention
// they get while coded: for every 4th query position t, softmax(q_t . k_s / sqrt(d)) over s <= t,
// counting only rows outside the default windows (s >= sink, s <= t - recent).
void layer_spectra(const std::vector<float>& rows_k, const std::vector<float>& rows_v, const std::vector<float>& queries,
                   int n, int H, int num_heads, int d, std::vector<ChannelSpectrum>& k_out,
                   std::vector<ChannelSpectrum>& v_out) {
  const int group = num_heads / H;
  const KvWindows w = default_kv_windows();
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t dd = size_t(d) * d;
  for (int h = 0; h < H; ++h) {
    std::vector<double> attention(n, 0.0), qm(dd, 0.0);
    std::vector<float> score(n);
    for (int g = 0; g < group; ++g) {
      const int qh = h * group + g;
      for (int t = 0; t < n; ++t) {
        const float* q = &queries[(size_t(t) * num_heads + qh) * d];
        for (int i = 0; i < d; ++i)
          for (int j = 0; j < d; ++j) qm[size_t(i) * d + j] += double(q[i]) * q[j];
        if (t % 4 != 0) continue;
        float top = -INFINITY;
        for (int s2 = 0; s2 <= t; ++s2) {
          const float* k = &rows_k[(size_t(s2) * H + h) * d];
          float dot = 0.0f;
          for (int j = 0; j < d; ++j) dot += q[j] * k[j];
          score[s2] = dot * inv_sqrt_d;
          top = std::max(top, score[s2]);
        }
        double total = 0.0;
        for (int s2 = 0; s2 <= t; ++s2) total += std::exp(double(score[s2] - top));
        for (int s2 = w.sink_tokens; s2 <= t - w.recent_tokens; ++s2) attention[s2] += std::exp(double(score[s2] - top)) / total;
      }
    }
    std::vector<double> kc(dd, 0.0), vc(dd, 0.0);
    double weight = 0.0;
    for (int t = 0; t < n; ++t) {
      const float* k = &rows_k[(size_t(t) * H + h) * d];
      const float* v = &rows_v[(size_t(t) * H + h) * d];
      weight += attention[t];
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) {
          kc[size_t(i) * d + j] += attention[t] * k[i] * k[j];
          vc[size_t(i) * d + j] += double(v[i]) * v[j] / n;
        }
    }
    if (!(weight > 0.0)) fail("KV calibration: no key row outside the windows got attention (text too short?)");
    for (double& x : kc) x /= weight;
    for (double& x : qm) x /= double(n) * group;
    k_out.push_back(channel_spectrum(kc, qm, d));
    v_out.push_back(channel_spectrum(vc, {}, d));
  }
}

}  // namespace

KvCalibration calibrate_kv(Transformer& model, const std::vector<TokenId>& ids, const KvCalibrationOptions& o) {
  const ModelConfig& c = model.config();
  // n: the affine maps' and outlier channels' tokens; n_run: those the model runs (more when the
  // channel spectra want more).
  const int n = std::min<int>(static_cast<int>(ids.size()), o.max_tokens);
  const int n_run = o.channel_spectra ? std::max(n, std::min<int>(static_cast<int>(ids.size()), o.channel_tokens)) : n;
  if (n < 16) fail("KV calibration needs at least 16 tokens of text, got {}", n);
  const int d = c.head_dim, H = c.num_kv_heads, group = c.num_heads / c.num_kv_heads;
  KvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = H;
  shape.head_dim = d;
  shape.k_dtype = shape.v_dtype = KvDtype::F32;
  KvCache cache(shape, (n_run + 15) / 16);
  BlockPool pool(cache);
  ScopedBlockTable sequence(pool);
  if (!sequence.allocate(n_run)) fail("KV calibration: cannot reserve {} tokens", n_run);
  const BlockTable& table = sequence.table();
  // Query energy per layer, KV head and channel, summed over the head's query group.
  std::vector<std::vector<std::vector<double>>> q_energy(c.num_layers, std::vector<std::vector<double>>(H, std::vector<double>(d)));
  // Channel spectra: every query, [layer][position][num_heads*d] (positions in forward order).
  std::vector<std::vector<float>> all_queries(o.channel_spectra ? c.num_layers : 0);
  int chunk_start = 0;
  model.set_attention_observer([&](int layer, int T, const float* q, const float*) {
    if (o.channel_spectra) all_queries[layer].insert(all_queries[layer].end(), q, q + size_t(T) * c.num_heads * d);
    for (int t = 0; t < std::min(T, n - chunk_start); ++t)
      for (int h = 0; h < c.num_heads; ++h)
        for (int j = 0; j < d; ++j) {
          const double v = q[(size_t(t) * c.num_heads + h) * d + j];
          q_energy[layer][h / group][j] += v * v;
        }
  });
  std::vector<float> logits;
  constexpr int kChunk = 256;
  try {
    for (int start = 0; start < n_run; start += kChunk) {
      ForwardBatch batch;
      chunk_start = start;
      for (int i = start; i < std::min(n_run, start + kChunk); ++i) batch.add(ids[i], i, &table, false);
      model.forward(batch, cache, logits);
    }
  } catch (...) {
    model.set_attention_observer({});
    throw;
  }
  model.set_attention_observer({});

  KvCalibration cal;
  for (auto* per_layer : {&cal.affine.k_mean, &cal.affine.v_mean, &cal.affine.k_scale}) per_layer->resize(c.num_layers);
  cal.outliers.k_order.resize(c.num_layers);
  cal.outliers.v_order.resize(c.num_layers);
  std::vector<float> k(size_t(H) * d), v(size_t(H) * d);
  for (int l = 0; l < c.num_layers; ++l) {
    // Sums and sums of squares per channel, in double.
    std::vector<std::vector<double>> ks(H, std::vector<double>(d)), vs = ks, kq = ks, vq = ks;
    for (int t = 0; t < n; ++t) {
      cache.read(l, table, t, k.data(), v.data());
      for (int h = 0; h < H; ++h)
        for (int j = 0; j < d; ++j) {
          const double kj = k[h * d + j], vj = v[h * d + j];
          ks[h][j] += kj, kq[h][j] += kj * kj;
          vs[h][j] += vj, vq[h][j] += vj * vj;
        }
    }
    for (int h = 0; h < H; ++h) {
      std::vector<float> km(d, 0.0f), vm(d, 0.0f);
      std::vector<double> ke(d), ve(d);
      for (int j = 0; j < d; ++j) {
        if (o.center_keys) km[j] = static_cast<float>(ks[h][j] / n);
        if (o.center_values) vm[j] = static_cast<float>(vs[h][j] / n);
        // Mean square about the center the rows will be quantized around.
        ke[j] = std::max(0.0, kq[h][j] / n - double(km[j]) * (2 * ks[h][j] / n - km[j]));
        ve[j] = std::max(0.0, vq[h][j] / n - double(vm[j]) * (2 * vs[h][j] / n - vm[j]));
      }
      std::vector<float> sc(d, 1.0f);
      if (o.scale_keys) {
        std::vector<double> qe(d);
        for (int j = 0; j < d; ++j) qe[j] = q_energy[l][h][j] / (double(n) * group);
        sc = key_scale(ke, qe, c.rope_pairing);
        for (int j = 0; j < d; ++j) ke[j] /= double(sc[j]) * sc[j];
      }
      if (o.center_keys) cal.affine.k_mean[l].push_back(std::move(km));
      if (o.center_values) cal.affine.v_mean[l].push_back(std::move(vm));
      if (o.scale_keys) cal.affine.k_scale[l].push_back(std::move(sc));
      cal.outliers.k_order[l].push_back(outlier_order(ke, /*pairs=*/true, c.rope_pairing));
      cal.outliers.v_order[l].push_back(outlier_order(ve, /*pairs=*/false, c.rope_pairing));
    }
  }
  if (o.channel_spectra) {
    cal.k_spectra.resize(c.num_layers);
    cal.v_spectra.resize(c.num_layers);
    std::vector<float> rows_k(size_t(n_run) * H * d), rows_v(rows_k.size());
    for (int l = 0; l < c.num_layers; ++l) {
      for (int t = 0; t < n_run; ++t) {
        cache.read(l, table, t, k.data(), v.data());
        for (int h = 0; h < H; ++h)
          for (int j = 0; j < d; ++j) {
            const size_t at = (size_t(t) * H + h) * d + j;
            const float mk = o.center_keys ? cal.affine.k_mean[l][h][j] : 0.0f;
            const float sk = o.scale_keys ? cal.affine.k_scale[l][h][j] : 1.0f;
            const float mv = o.center_values ? cal.affine.v_mean[l][h][j] : 0.0f;
            rows_k[at] = (k[h * d + j] - mk) / sk;
            rows_v[at] = v[h * d + j] - mv;
          }
      }
      std::vector<float>& q = all_queries[l];
      if (o.scale_keys)
        for (size_t i = 0; i < q.size(); ++i) q[i] *= cal.affine.k_scale[l][(i / d) % c.num_heads / group][i % d];
      layer_spectra(rows_k, rows_v, q, n_run, H, c.num_heads, d, cal.k_spectra[l], cal.v_spectra[l]);
      std::vector<float>().swap(q);
    }
  }
  if (!o.center_keys) cal.affine.k_mean.clear();
  if (!o.center_values) cal.affine.v_mean.clear();
  if (!o.scale_keys) cal.affine.k_scale.clear();
  return cal;
}

}  // namespace tq
