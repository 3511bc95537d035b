// The executor's model configuration as a checkpoint manifest holds it (exec/model_config.h, model_from_json):
// integers that do not fit an int and floats a float cannot hold are refused by name, never narrowed (issue 38:
// "seq" 4294967312 became 16, "rope_theta" 1e39 became inf and passed the "> 0" check).
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "exec/model_config.h"

using namespace trainsim;

namespace {

std::string refusal(const nlohmann::json& j) {
  try {
    exec::model_from_json(j).validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("model manifest: a configuration round-trips, out-of-range fields are refused by name") {
  const exec::ModelConfig tiny = exec::preset("tiny");
  const nlohmann::json good = exec::to_json(tiny);
  CHECK(refusal(good) == "(accepted)");
  CHECK(exec::to_json(exec::model_from_json(good)) == good);

  nlohmann::json j = good;
  j["seq"] = 4294967312LL;  // 2^32 + 16
  CHECK(refusal(j) == "model configuration: 'seq' is 4294967312, beyond an int");
  j = good;
  j["dim"] = 18446744073709551615ULL;
  CHECK(refusal(j).find("'dim' is 18446744073709551615, beyond an int") != std::string::npos);
  j = good;
  j["heads"] = 2.5;
  CHECK(refusal(j) == "model configuration: 'heads' must be an integer, not 2.5");
  j = good;
  j["rope_theta"] = 1e39;
  CHECK(refusal(j) == "model configuration: 'rope_theta' is 1e+39, beyond what a float holds");
  j = good;
  j["norm_eps"] = -1e39;
  CHECK(refusal(j).find("'norm_eps' is -1e+39, beyond what a float holds") != std::string::npos);
  j = good;
  j["init_std"] = "0.02";
  CHECK(refusal(j) == "model configuration: 'init_std' must be a number, not \"0.02\"");
}

TEST_CASE("model manifest: an MoE model's capacity factor and load-balancing coefficient round-trip exactly, and "
          "are refused where they cannot hold") {
  // Each: a value set (not a float: read back as a double, the same bits), absent when 0 (manifests as before the
  // field), and refusals of a mistyped value, of values out of range, and of the field on a dense model.
  struct Field {
    const char* name;
    double exec::ModelConfig::*member;
    double value;
    nlohmann::json mistyped;
    std::vector<std::pair<double, std::string>> out_of_range;
    std::string on_dense;
  };
  const std::vector<Field> fields = {
      {"capacity_factor", &exec::ModelConfig::capacity_factor, 1.1, "1.1",
       {{-1, "capacity_factor must be 0 (dropless) or 0.01 to 1000, got -1"},
        {1e300, "capacity_factor must be 0 (dropless) or 0.01 to 1000, got 1e+300"}},
       "top_k (0), dense_blocks (0), capacity_factor (1.1) and aux_loss_coeff (0) are for MoE models: set experts "
       "too"},
      {"aux_loss_coeff", &exec::ModelConfig::aux_loss_coeff, 0.01, nullptr,
       {{-0.5, "aux_loss_coeff must be 0 (none) to 10, got -0.5"}, {11, "aux_loss_coeff must be 0 (none) to 10, got 11"}},
       "top_k (0), dense_blocks (0), capacity_factor (0) and aux_loss_coeff (0.01) are for MoE models: set experts "
       "too"},
  };
  for (const Field& f : fields) {
    CAPTURE(f.name);
    exec::ModelConfig moe = exec::preset("tiny-moe");
    moe.*f.member = f.value;
    const nlohmann::json good = exec::to_json(moe);
    CHECK(refusal(good) == "(accepted)");
    CHECK(exec::model_from_json(good) == moe);
    CHECK_FALSE(exec::to_json(exec::preset("tiny-moe")).contains(f.name));
    nlohmann::json j = good;
    j[f.name] = f.mistyped;
    CHECK(refusal(j) == fmt::format("model configuration: '{}' must be a finite number, not {}", f.name, f.mistyped.dump()));
    for (const auto& [v, why] : f.out_of_range) {
      j[f.name] = v;
      CHECK(refusal(j) == why);
    }
    j = exec::to_json(exec::preset("tiny"));
    j[f.name] = f.value;
    CHECK(refusal(j) == f.on_dense);
  }
}
