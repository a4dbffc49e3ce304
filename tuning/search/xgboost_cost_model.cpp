#include "tuning/search/xgboost_cost_model.h"

#include <xgboost/c_api.h>

#include <limits>
#include <stdexcept>
#include <string>

namespace nimble::tuning {
namespace {

void check(int status, const char* what) {
  if (status != 0) throw std::runtime_error(std::string(what) + ": " + XGBGetLastError());
}

struct DMatrixDeleter {
  void operator()(void* handle) const { XGDMatrixFree(handle); }
};
using DMatrix = std::unique_ptr<void, DMatrixDeleter>;

DMatrix make_matrix(const std::vector<std::vector<float>>& features) {
  const size_t rows = features.size();
  const size_t cols = rows ? features[0].size() : 0;
  std::vector<float> dense;
  dense.reserve(rows * cols);
  for (const auto& row : features) dense.insert(dense.end(), row.begin(), row.end());
  DMatrixHandle handle = nullptr;
  // NaN marks missing values; our features are never missing, so any NaN is fine here.
  check(XGDMatrixCreateFromMat(dense.data(), rows, cols, std::numeric_limits<float>::quiet_NaN(),
                               &handle),
        "XGDMatrixCreateFromMat");
  return DMatrix(handle);
}

}  // namespace

void XGBoostCostModel::BoosterDeleter::operator()(void* handle) const { XGBoosterFree(handle); }

XGBoostCostModel::XGBoostCostModel(CostModelOptions options, uint64_t seed)
    : options_(options), seed_(seed) {}

void XGBoostCostModel::fit(const std::vector<std::vector<float>>& features,
                           const std::vector<float>& targets) {
  if (features.empty() || features.size() != targets.size())
    throw std::invalid_argument("cost model needs one target per feature row");
  DMatrix train = make_matrix(features);
  check(XGDMatrixSetFloatInfo(train.get(), "label", targets.data(), targets.size()),
        "XGDMatrixSetFloatInfo");
  DMatrixHandle handles[] = {train.get()};
  BoosterHandle raw = nullptr;
  check(XGBoosterCreate(handles, 1, &raw), "XGBoosterCreate");
  std::unique_ptr<void, BoosterDeleter> booster(raw);
  const std::string params[][2] = {
      {"objective", "reg:squarederror"},
      {"max_depth", std::to_string(options_.max_depth)},
      {"eta", std::to_string(options_.eta)},
      {"nthread", std::to_string(options_.threads)},
      {"seed", std::to_string(seed_ % 2147483647)},
      {"verbosity", "0"},
      {"tree_method", "exact"},
  };
  for (const auto& kv : params)
    check(XGBoosterSetParam(booster.get(), kv[0].c_str(), kv[1].c_str()), "XGBoosterSetParam");
  for (int i = 0; i < options_.rounds; ++i)
    check(XGBoosterUpdateOneIter(booster.get(), i, train.get()), "XGBoosterUpdateOneIter");
  booster_ = std::move(booster);
}

std::vector<float> XGBoostCostModel::predict(
    const std::vector<std::vector<float>>& features) const {
  if (!booster_) throw std::logic_error("cost model used before it was trained");
  if (features.empty()) return {};
  DMatrix data = make_matrix(features);
  bst_ulong length = 0;
  const float* out = nullptr;
  check(XGBoosterPredict(booster_.get(), data.get(), 0, 0, 0, &length, &out), "XGBoosterPredict");
  return std::vector<float>(out, out + length);
}

}  // namespace nimble::tuning
