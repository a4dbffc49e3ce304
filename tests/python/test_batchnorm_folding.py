"""Batch norm folded into convolutions: equal to eager, fewer ops, never stale."""

import torch

import nimble
from nimble.testing import assert_matches_eager
from nimble.zoo import build


def test_folding_removes_batch_norms_and_matches_eager():
    model, example = build("torchvision:resnet18")
    folded = nimble.Nimble(model).prepare(example, fold_batchnorm=True, lower_for_cpu=False)
    plain = nimble.Nimble(model).prepare(example, lower_for_cpu=False)
    names = [op["name"] for op in folded.replay.ops()]
    assert not any("batch_norm" in n for n in names)
    assert folded.num_ops < plain.num_ops
    x = torch.randn_like(example)
    with torch.no_grad():
        # Folding reassociates float math: equal up to rounding, not bitwise.
        assert_matches_eager(folded(x), model(x))


def test_folded_weights_follow_parameter_updates():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
    fast = nimble.Nimble(model).prepare(torch.randn(1, 3, 8, 8), fold_batchnorm=True, lower_for_cpu=False)
    with torch.no_grad():
        model[0].weight.mul_(2)              # like an optimizer step
        model[1].running_var.add_(1.0)       # like load_state_dict
        model[1].weight.copy_(torch.randn(4))
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x))


def test_batch_norm_whose_input_is_read_elsewhere_is_not_folded():
    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 3, 1)
            self.bn = torch.nn.BatchNorm2d(3)

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y

    model = Both().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_()
    fast = nimble.Nimble(model).prepare(torch.randn(1, 3, 4, 4), fold_batchnorm=True, lower_for_cpu=False)
    assert any("batch_norm" in op["name"] for op in fast.replay.ops())
    x = torch.randn(1, 3, 4, 4)
    with torch.no_grad():
        assert_matches_eager(fast(x), model(x), tolerance=1e-5)


def test_convolution_whose_result_is_an_output_is_not_folded():
    # Found by the layout fuzz (seeds 307, 747, 1504, 1948): the convolution's result read
    # only by the batch norm inside the trace, but also returned. Folding handed the user the
    # batch norm's values for the convolution's output: a silent wrong result.
    class Returned(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x):
            y = self.conv(x)
            return y, torch.relu(self.bn(y))

    model = Returned().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
        model.bn.weight.uniform_(0.5, 1.5)
    example = torch.randn(1, 3, 8, 8)
    for lower in (False, True):
        fast = nimble.Nimble(model).prepare(example, fold_batchnorm=True, lower_for_cpu=lower)
        x = torch.randn(1, 3, 8, 8)
        with torch.no_grad():
            assert_matches_eager(fast(x), model(x))
