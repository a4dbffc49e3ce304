#include "csrc/kernels/cpu/channels_last/kernel_parameters.h"

#include <sstream>
#include <stdexcept>

namespace nimble::kernels::nhwc {
namespace {

const char* loop_order_name(LoopOrder order) {
  switch (order) {
    case LoopOrder::kRowsOutside:
      return "rows";
    case LoopOrder::kColumnsOutside:
      return "columns";
    case LoopOrder::kRule:
      break;
  }
  return "rule";
}

void refuse(const std::string& text, const std::string& why) {
  throw std::invalid_argument("kernel parameters '" + text + "': " + why +
                              " (expected name=value words among gemm.pieces, "
                              "gemm.rows_per_block, gemm.column_splits, gemm.loop_order "
                              "(rows|columns), gemm.tile_rows, gemm.reduction_block, "
                              "gemm.tile_vectors, depthwise.channel_vectors, "
                              "depthwise.pixels, depthwise.windows (off), depthwise.pieces)");
}

}  // namespace

std::string KernelParameters::to_string() const {
  std::ostringstream out;
  const auto put = [&](const char* name, const auto& value, bool set) {
    if (!set) return;
    if (out.tellp() > 0) out << " ";
    out << name << "=" << value;
  };
  put("gemm.pieces", gemm.pieces, gemm.pieces != 0);
  put("gemm.rows_per_block", gemm.rows_per_block, gemm.rows_per_block != 0);
  put("gemm.column_splits", gemm.column_splits, gemm.column_splits != 0);
  put("gemm.loop_order", loop_order_name(gemm.loop_order), gemm.loop_order != LoopOrder::kRule);
  put("gemm.tile_rows", gemm.tile_rows, gemm.tile_rows != 0);
  put("gemm.reduction_block", gemm.reduction_block, gemm.reduction_block != 0);
  put("gemm.tile_vectors", gemm.tile_vectors, gemm.tile_vectors != 0);
  put("depthwise.channel_vectors", depthwise.channel_vectors, depthwise.channel_vectors != 0);
  put("depthwise.pixels", depthwise.pixels, depthwise.pixels != 0);
  put("depthwise.windows", "off", !depthwise.windows);
  put("depthwise.pieces", depthwise.pieces, depthwise.pieces != 0);
  return out.str();
}

KernelParameters KernelParameters::parse(const std::string& text) {
  KernelParameters p;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    const size_t equals = word.find('=');
    if (equals == std::string::npos) refuse(text, "'" + word + "' is not name=value");
    const std::string name = word.substr(0, equals), value = word.substr(equals + 1);
    if (name == "gemm.loop_order") {
      if (value == "rows") {
        p.gemm.loop_order = LoopOrder::kRowsOutside;
      } else if (value == "columns") {
        p.gemm.loop_order = LoopOrder::kColumnsOutside;
      } else if (value != "rule") {
        refuse(text, "gemm.loop_order is rows, columns or rule, not '" + value + "'");
      }
      continue;
    }
    if (name == "depthwise.windows") {
      if (value != "off" && value != "on") refuse(text, "depthwise.windows is on or off");
      p.depthwise.windows = value == "on";
      continue;
    }
    int64_t number = 0;
    size_t used = 0;
    try {
      number = std::stoll(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size() || number < 0)
      refuse(text, "'" + value + "' is not a count (an integer, 0 for the rule's)");
    int64_t* field = name == "gemm.pieces"                 ? &p.gemm.pieces
                     : name == "gemm.rows_per_block"       ? &p.gemm.rows_per_block
                     : name == "gemm.column_splits"        ? &p.gemm.column_splits
                     : name == "gemm.tile_rows"            ? &p.gemm.tile_rows
                     : name == "gemm.reduction_block"      ? &p.gemm.reduction_block
                     : name == "gemm.tile_vectors"         ? &p.gemm.tile_vectors
                     : name == "depthwise.channel_vectors" ? &p.depthwise.channel_vectors
                     : name == "depthwise.pixels"          ? &p.depthwise.pixels
                     : name == "depthwise.pieces"          ? &p.depthwise.pieces
                                                           : nullptr;
    if (!field) refuse(text, "no parameter '" + name + "'");
    *field = number;
  }
  return p;
}

}  // namespace nimble::kernels::nhwc
