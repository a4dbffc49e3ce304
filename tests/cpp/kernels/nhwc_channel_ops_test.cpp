// nimble's channels-last kernels for the ops between convolutions: max and average pooling
// (csrc/kernels/cpu/channels_last/pooling.h) against a direct reference over random geometries
// (padding, dilation, ceil_mode's partial windows, ATen's divisors), NaN winning a max
// window; concatenation along channels (channel_ops.h); and the inference batch norm with its
// activation (epilogue.h's scale_shift); the mean over pixels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "csrc/kernels/cpu/channels_last/channel_ops.h"
#include "csrc/kernels/cpu/channels_last/epilogue.h"
#include "csrc/kernels/cpu/channels_last/pooling.h"
#include "tests/cpp/kernels/nhwc_reference.h"

namespace nimble::kernels::nhwc {
namespace {

// ATen's pooling_output_shape: with ceil_mode the last window may hang over the end, but
// must start inside the padded input.
int64_t out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil) {
  const int64_t span = in + 2 * pad - dilation * (k - 1) - 1;
  int64_t out = (span + (ceil ? stride - 1 : 0)) / stride + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

PoolGeometry random_geometry(std::mt19937_64& rng, bool dilated) {
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  PoolGeometry g;
  g.batch = pick(1, 2);
  g.channels = pick(1, 40);  // vector tails of every length
  g.kernel_h = pick(1, 4);
  g.kernel_w = pick(1, 4);
  g.stride_h = pick(1, 3);
  g.stride_w = pick(1, 3);
  g.pad_h = pick(0, g.kernel_h / 2);
  g.pad_w = pick(0, g.kernel_w / 2);
  g.dilation_h = dilated ? pick(1, 2) : 1;
  g.dilation_w = dilated ? pick(1, 2) : 1;
  g.height = pick(g.dilation_h * (g.kernel_h - 1) + 1, 11);
  g.width = pick(g.dilation_w * (g.kernel_w - 1) + 1, 11);
  const bool ceil = pick(0, 1) == 1;
  g.out_height = out_size(g.height, g.kernel_h, g.pad_h, g.stride_h, g.dilation_h, ceil);
  g.out_width = out_size(g.width, g.kernel_w, g.pad_w, g.stride_w, g.dilation_w, ceil);
  return g;
}

std::vector<float> random_values(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

float at(const std::vector<float>& x, const PoolGeometry& g, int64_t n, int64_t h, int64_t w,
         int64_t c) {
  return x[static_cast<size_t>(((n * g.height + h) * g.width + w) * g.channels + c)];
}

int64_t out_index(const PoolGeometry& g, int64_t n, int64_t oh, int64_t ow, int64_t c) {
  return ((n * g.out_height + oh) * g.out_width + ow) * g.channels + c;
}

// Each ISA's code this CPU runs (the vector code's register blocks, tails of every length).
class NhwcMaxPooling : public testing::TestWithParam<Isa> {};

TEST_P(NhwcMaxPooling, MatchesTheDefinitionOnRandomGeometries) {
  if (!supports(GetParam())) GTEST_SKIP() << "this CPU has no " << isa_name(GetParam());
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 600; ++trial) {
    PoolGeometry g = random_geometry(rng, /*dilated=*/true);
    if (trial % 3 == 0) g.channels += 64;  // several register blocks, then single vectors
    std::vector<float> x = random_values(rng, g.batch * g.height * g.width * g.channels);
    if (trial % 5 == 0) x[x.size() / 2] = std::numeric_limits<float>::quiet_NaN();
    if (trial % 7 == 0) x[x.size() / 3] = -std::numeric_limits<float>::infinity();
    std::vector<float> y(static_cast<size_t>(g.rows() * g.out_width * g.channels));
    // In two ranges of rows, as a split over threads calls it.
    const int64_t half = g.rows() / 2;
    max_pool(GetParam(), x.data(), y.data(), g, 0, half);
    max_pool(GetParam(), x.data(), y.data(), g, half, g.rows());
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t oh = 0; oh < g.out_height; ++oh)
        for (int64_t ow = 0; ow < g.out_width; ++ow)
          for (int64_t c = 0; c < g.channels; ++c) {
            float want = -std::numeric_limits<float>::infinity();
            for (int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                const int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
                const int64_t iw = ow * g.stride_w - g.pad_w + kw * g.dilation_w;
                if (ih < 0 || iw < 0 || ih >= g.height || iw >= g.width) continue;
                const float v = at(x, g, n, ih, iw, c);
                if (std::isnan(v) || std::isnan(want)) {
                  want = std::numeric_limits<float>::quiet_NaN();
                } else {
                  want = std::max(want, v);
                }
              }
            const float got = y[static_cast<size_t>(out_index(g, n, oh, ow, c))];
            if (std::isnan(want)) {
              ASSERT_TRUE(std::isnan(got)) << "trial " << trial;
            } else {
              ASSERT_EQ(got, want) << "trial " << trial;
            }
          }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, NhwcMaxPooling,
                         testing::Values(Isa::kAvx512, Isa::kAvx2, Isa::kPortable),
                         [](const testing::TestParamInfo<Isa>& info) {
                           return std::string(isa_name(info.param));
                         });

TEST(NhwcPooling, AveragePoolingMatchesAtenDivisorsOnRandomGeometries) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const PoolGeometry g = random_geometry(rng, /*dilated=*/false);
    const bool include_pad = trial % 2 == 0;
    const int64_t divisor = trial % 7 == 0 ? 3 : 0;
    const std::vector<float> x = random_values(rng, g.batch * g.height * g.width * g.channels);
    std::vector<float> y(static_cast<size_t>(g.rows() * g.out_width * g.channels));
    avg_pool(x.data(), y.data(), g, include_pad, divisor, 0, g.rows());
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t oh = 0; oh < g.out_height; ++oh)
        for (int64_t ow = 0; ow < g.out_width; ++ow)
          for (int64_t c = 0; c < g.channels; ++c) {
            double sum = 0;
            int64_t inside = 0, padded = 0;
            for (int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                const int64_t ih = oh * g.stride_h - g.pad_h + kh;
                const int64_t iw = ow * g.stride_w - g.pad_w + kw;
                // A window position counts as padding up to pad beyond the input's end.
                if (ih < g.height + g.pad_h && iw < g.width + g.pad_w) ++padded;
                if (ih < 0 || iw < 0 || ih >= g.height || iw >= g.width) continue;
                sum += at(x, g, n, ih, iw, c);
                ++inside;
              }
            const double count = divisor != 0 ? divisor : (include_pad ? padded : inside);
            const double want = inside == 0 ? 0.0 : sum / count;
            const float got = y[static_cast<size_t>(out_index(g, n, oh, ow, c))];
            ASSERT_NEAR(got, want, 1e-5 + 1e-5 * std::fabs(want)) << "trial " << trial;
          }
  }
}

// Random inputs of `channels` each over `pixels` pixels; input i a slice of a row `extra[i]`
// floats wider than its channels, as a split of a wider tensor's channels is.
struct RowInputs {
  std::vector<std::vector<float>> storage;
  std::vector<ChannelRows> rows;
  RowInputs(std::mt19937_64& rng, const std::vector<int64_t>& channels,
            const std::vector<int64_t>& extra, int64_t pixels) {
    for (size_t i = 0; i < channels.size(); ++i)
      storage.push_back(random_values(rng, pixels * (channels[i] + extra[i])));
    for (size_t i = 0; i < channels.size(); ++i)
      rows.push_back({storage[i].data() + extra[i] / 2, channels[i], channels[i] + extra[i]});
  }
  float at(size_t i, int64_t p, int64_t c) const {
    return rows[i].data[p * rows[i].pixel_stride + c];
  }
};

TEST(NhwcChannelOps, ConcatenationPutsEachPixelsChannelsSideBySide) {
  std::mt19937_64 rng(3);
  const std::vector<int64_t> channels = {3, 16, 1, 33};
  const int64_t pixels = 13;
  const RowInputs in(rng, channels, {0, 5, 0, 2}, pixels);
  const int64_t total = 3 + 16 + 1 + 33;
  std::vector<float> y(static_cast<size_t>(pixels * total));
  concatenate_channels(in.rows.data(), 4, y.data(), 0, 5);
  concatenate_channels(in.rows.data(), 4, y.data(), 5, pixels);
  for (int64_t p = 0; p < pixels; ++p) {
    int64_t offset = 0;
    for (size_t i = 0; i < channels.size(); ++i) {
      for (int64_t c = 0; c < channels[i]; ++c)
        ASSERT_EQ(y[static_cast<size_t>(p * total + offset + c)], in.at(i, p, c));
      offset += channels[i];
    }
  }
}

// Property: for random splits of random channel counts into inputs and random group counts,
// y[p, j * groups + g] is channel g * (c / groups) + j of the concatenation.
TEST(NhwcChannelOps, ShuffleTakesEachGroupsChannelsInTurn) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t groups = 1 + static_cast<int64_t>(rng() % 4);
    const int64_t total = groups * (1 + static_cast<int64_t>(rng() % 24));
    std::vector<int64_t> channels, extra;
    // ShuffleNet's two halves every fourth trial (the interleaving path), else random cuts.
    if (trial % 4 == 0 && total % 2 == 0 && groups == 2) {
      channels = {total / 2, total / 2};
    } else {
      for (int64_t left = total; left > 0;) {
        channels.push_back(1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(left)));
        left -= channels.back();
      }
    }
    for (size_t i = 0; i < channels.size(); ++i) extra.push_back(static_cast<int64_t>(rng() % 3));
    const int64_t pixels = 1 + static_cast<int64_t>(rng() % 9);
    const RowInputs in(rng, channels, extra, pixels);
    std::vector<float> y(static_cast<size_t>(pixels * total));
    const int64_t cut = static_cast<int64_t>(rng() % static_cast<uint64_t>(pixels + 1));
    const auto count = static_cast<int64_t>(channels.size());
    shuffle_channels(in.rows.data(), count, groups, y.data(), 0, cut);
    shuffle_channels(in.rows.data(), count, groups, y.data(), cut, pixels);
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t o = 0; o < total; ++o) {
        int64_t s = (o % groups) * (total / groups) + o / groups;
        size_t i = 0;
        while (s >= channels[i]) s -= channels[i++];
        ASSERT_EQ(y[static_cast<size_t>(p * total + o)], in.at(i, p, s))
            << "trial " << trial << " pixel " << p << " channel " << o;
      }
  }
}

// Property: any images x channels x pixels, converted in two ranges split anywhere (a range
// may start or end inside an image), equals the NCHW input read per pixel, on every ISA (3
// channels, a program's input, take a path of their own: a third of the trials have 3).
TEST(NhwcChannelOps, ToChannelsLastPutsEachPixelsChannelsSideBySide) {
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 150; ++trial) {
    const int64_t images = 1 + static_cast<int64_t>(rng() % 3);
    const int64_t channels = trial % 3 == 0 ? 3 : 1 + static_cast<int64_t>(rng() % 9);
    const int64_t pixels = 1 + static_cast<int64_t>(rng() % 300);
    const std::vector<float> x = random_values(rng, images * channels * pixels);
    const int64_t cut = static_cast<int64_t>(rng() % static_cast<uint64_t>(images * pixels + 1));
    for (const Isa isa : runnable_isas()) {
      std::vector<float> y(x.size(), -1.0F);
      to_channels_last(isa, x.data(), y.data(), channels, pixels, 0, cut);
      to_channels_last(isa, x.data(), y.data(), channels, pixels, cut, images * pixels);
      for (int64_t n = 0; n < images; ++n)
        for (int64_t p = 0; p < pixels; ++p)
          for (int64_t c = 0; c < channels; ++c)
            ASSERT_EQ(y[static_cast<size_t>((n * pixels + p) * channels + c)],
                      x[static_cast<size_t>((n * channels + c) * pixels + p)])
                << "trial " << trial << " " << isa_name(isa);
    }
  }
}

TEST(NhwcChannelOps, ScaleShiftIsAnAffinePerChannelThenTheActivation) {
  std::mt19937_64 rng(5);
  const int64_t channels = 37, pixels = 9;
  const std::vector<float> x = random_values(rng, pixels * channels);
  const std::vector<float> scale = random_values(rng, channels);
  const std::vector<float> shift = random_values(rng, channels);
  for (const Isa isa : runnable_isas()) {
    for (const Epilogue e :
         {Epilogue{Activation::kNone, 0, 0}, Epilogue{Activation::kRelu, 0, 0},
          Epilogue{Activation::kClamp, -0.5F, 0.5F}, Epilogue{Activation::kSilu, 0, 0}}) {
      std::vector<float> y(x.size());
      scale_shift(isa, x.data(), y.data(), scale.data(), shift.data(), channels, e, 0, 4);
      scale_shift(isa, x.data(), y.data(), scale.data(), shift.data(), channels, e, 4, pixels);
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t c = 0; c < channels; ++c) {
          const size_t i = static_cast<size_t>(p * channels + c);
          const double want =
              reference_activation(static_cast<double>(x[i]) * scale[static_cast<size_t>(c)] +
                                       shift[static_cast<size_t>(c)],
                                   e);
          ASSERT_NEAR(y[i], want, 1e-5 + 1e-5 * std::fabs(want)) << isa_name(isa);
        }
    }
  }
}

// Units of kMeanChannels channels of one image, split anywhere: channel counts below, at and
// past a unit's, pixel counts that the four-pixel chains do and do not divide.
TEST(NhwcChannelOps, MeanOverPixelsMatchesASumInDoubleForAnySplitOfItsUnits) {
  std::mt19937_64 rng(11);
  for (const int64_t channels : {3, 16, 35, 48, 144}) {
    for (const int64_t pixels : {1, 4, 7, 49, 130}) {
      const int64_t images = 2;
      const std::vector<float> x = random_values(rng, images * pixels * channels);
      std::vector<float> y(static_cast<size_t>(images * channels), -1.0F);
      const int64_t units = mean_units(images, channels);
      const int64_t cut = std::uniform_int_distribution<int64_t>(0, units)(rng);
      for (const Isa isa : runnable_isas()) {
        std::fill(y.begin(), y.end(), -1.0F);
        mean_over_pixels(isa, x.data(), y.data(), pixels, channels, 0, cut);
        mean_over_pixels(isa, x.data(), y.data(), pixels, channels, cut, units);
        for (int64_t n = 0; n < images; ++n)
          for (int64_t c = 0; c < channels; ++c) {
            double sum = 0;
            for (int64_t p = 0; p < pixels; ++p)
              sum += x[static_cast<size_t>((n * pixels + p) * channels + c)];
            ASSERT_NEAR(y[static_cast<size_t>(n * channels + c)], sum / pixels, 1e-6)
                << isa_name(isa) << ", " << channels << " channels, " << pixels
                << " pixels, channel " << c;
          }
      }
    }
  }
}

TEST(NhwcChannelOps, ScaleChannelsMultipliesEachImagesChannelsByItsScale) {
  std::mt19937_64 rng(12);
  const int64_t images = 2, pixels = 9, channels = 37;
  const std::vector<float> x = random_values(rng, images * pixels * channels);
  const std::vector<float> scale = random_values(rng, images * channels);
  for (const Isa isa : runnable_isas()) {
    std::vector<float> y(x.size());
    scale_channels(isa, x.data(), scale.data(), y.data(), pixels, channels, 0, 5);
    scale_channels(isa, x.data(), scale.data(), y.data(), pixels, channels, 5, images * pixels);
    for (int64_t n = 0; n < images; ++n)
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t c = 0; c < channels; ++c) {
          const size_t i = static_cast<size_t>((n * pixels + p) * channels + c);
          ASSERT_EQ(y[i], x[i] * scale[static_cast<size_t>(n * channels + c)]) << isa_name(isa);
        }
  }
}

}  // namespace
}  // namespace nimble::kernels::nhwc
