// Measured kernel throughput tables of a device (hardware/device.h): GEMMs by shape, flash attention by head
// dimension and sequence length. A table holds throughputs as fractions of the device's peak FLOP/s at grid
// points; the cost model uses each point relative to the table's best (a shape factor in (0, 1]), so that the
// device's efficiency fields keep their meaning (the fraction of peak at the best shape) and `trainsim
// calibrate` can fit them with the shape factors known. docs/hardware-model.md gives the presets' sources.
//
// Lookups interpolate linearly in log2 of each coordinate between grid points and clamp to the grid: beyond
// its largest point a kernel runs as fast as there (a larger GEMM is as efficient as the largest measured),
// below its smallest as slow as there (hardware/op_costs.h adds a memory-bandwidth floor for small GEMMs).
#pragma once

#include <string>
#include <vector>

namespace trainsim::hw {

/// GEMM throughput on a full grid of M x N x K shapes (an M x K matrix times a K x N one).
struct GemmShapeTable {
  std::vector<double> m, n, k;  ///< ascending grid coordinates
  std::vector<double> value;    ///< [i_m][i_n][i_k] (row-major), fraction of peak
  double best = 0;              ///< the largest value

  bool empty() const { return value.empty(); }
  /// value(M, N, K) / best, in (0, 1]; 1 for an empty table.
  double factor(double M, double N, double K) const;
  friend bool operator==(const GemmShapeTable&, const GemmShapeTable&) = default;
};

/// Causal flash attention throughput on a full grid of head dimension x sequence length, forward and
/// backward, in FlashAttention's own FLOP count (a causal forward 2·s²·d per head and sequence, half the
/// unmasked 4·s²·d; a backward 2.5 times its forward: Dao 2023, §4.1).
struct AttentionTable {
  std::vector<double> head_dim, seq;    ///< ascending grid coordinates
  std::vector<double> forward, backward;  ///< [i_d][i_s] (row-major), fraction of peak
  double best = 0;                      ///< the largest forward value

  bool empty() const { return forward.empty(); }
  /// forward(d, s) / best; 1 for an empty table.
  double forward_factor(double d, double s) const;
  /// backward(d, s) / best (relative to the best forward); 1 for an empty table.
  double backward_factor(double d, double s) const;
  friend bool operator==(const AttentionTable&, const AttentionTable&) = default;
};

/// "MxNxK:v,MxNxK:v,..." (every grid point once, any order; "" for none) -> table. Throws SpecError for bad
/// syntax, a value outside (0, 1], a missing or repeated grid point.
GemmShapeTable parse_gemm_table(const std::string& text);
/// The canonical text: grid order, numbers in shortest round-trip form.
std::string gemm_table_text(const GemmShapeTable& t);
/// "DxS:fwd/bwd,..." -> table, as parse_gemm_table.
AttentionTable parse_attention_table(const std::string& text);
std::string attention_table_text(const AttentionTable& t);

}  // namespace trainsim::hw
