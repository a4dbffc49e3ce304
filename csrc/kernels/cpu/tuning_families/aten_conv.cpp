// Family "aten": the convolution algorithms PyTorch itself has on the CPU, chosen per op
// (Nimble's per-convolution backend choice, DLAS's per-layer algorithm choice): oneDNN, or
// the im2col + GEMM path (`_slow_conv2d`), and for a linear layer also its own `addmm`
// (BLAS); input and weight contiguous or channels_last; the intra-op thread count.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"

namespace nimble::kernels {
namespace {

bool plain(const TunableOp& op) {
  return op.groups == 1 && op.dilation == std::array<int64_t, 2>{1, 1};
}

std::vector<std::string> backends(const TunableOp& op) {
  std::vector<std::string> out;
  if (op.kind == TunableOp::Kind::kLinear) out.push_back("addmm");
  if (at::hasMKLDNN()) out.push_back("onednn");
  if (plain(op)) out.push_back("slow_conv2d");
  // No NNPACK: it runs on its own thread pool, whose threads then fight the OpenMP threads
  // of every other op of the replay for the cores (4 ms stalls per op on 2 cores, while it
  // looked fastest when timed alone).
  return out;
}

class AtenConv : public TunedKernel {
 public:
  AtenConv(TunableOp op, std::string backend, bool channels_last, int64_t threads)
      : op_(std::move(op)),
        backend_(std::move(backend)),
        channels_last_(channels_last),
        threads_(threads) {}

  at::Tensor run(at::TensorList operands) const override {
    ThreadsScope threads(threads_);
    at::Tensor x = operands[0];
    at::Tensor w = operands[1];
    if (channels_last_) {
      x = x.contiguous(at::MemoryFormat::ChannelsLast);
      w = weight_.get(
          w, [](const at::Tensor& t) { return t.contiguous(at::MemoryFormat::ChannelsLast); });
    }
    const std::optional<at::Tensor> bias =
        op_.bias ? std::optional<at::Tensor>(operands[2]) : std::nullopt;
    at::Tensor y;
    if (backend_ == "addmm") {
      y = at::addmm(operands[2], x.reshape({op_.n, op_.c}), w.reshape({op_.k, op_.c}).t())
              .view({op_.n, op_.k, 1, 1});
    } else if (backend_ == "onednn") {
      y = at::mkldnn_convolution(x, w, bias, op_.padding, op_.stride, op_.dilation, op_.groups);
    } else if (backend_ == "slow_conv2d") {
      y = at::_slow_conv2d_forward(x, w, {op_.r, op_.s}, bias, op_.stride, op_.padding);
    } else {
      throw std::invalid_argument("unknown convolution backend " + backend_);
    }
    return in_output_layout(op_, std::move(y));
  }

 private:
  TunableOp op_;
  std::string backend_;
  bool channels_last_;
  int64_t threads_;
  DerivedTensor weight_;
};

class AtenConvFamily : public KernelFamily {
 public:
  std::string name() const override { return "aten"; }
  bool supports(const TunableOp& op) const override {
    return op.device == c10::DeviceType::CPU && !backends(op).empty();
  }
  std::vector<tuning::Knob> knobs(const TunableOp& op) const override {
    return {tuning::Knob::categorical("backend", backends(op)),
            tuning::Knob::categorical("layout", {"contiguous", "channels_last"}), threads_knob()};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    return std::make_unique<AtenConv>(op, k.label("backend"), k.label("layout") == "channels_last",
                                      k.value("threads"));
  }
};

}  // namespace

std::shared_ptr<const KernelFamily> aten_conv_family() {
  return std::make_shared<AtenConvFamily>();
}

}  // namespace nimble::kernels
