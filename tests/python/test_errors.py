"""Bad input gets a clear error that says what was expected and what came."""

import inspect

import pytest
import torch

import nimble


@pytest.fixture
def fast():
    return nimble.Nimble(torch.nn.Linear(4, 3).eval()).prepare(torch.randn(2, 4))


def test_wrong_shape(fast):
    with pytest.raises(ValueError, match=r"expected a float32 tensor of shape \[2, 4\].*got a float32 tensor of shape \[5, 4\]"):
        fast(torch.randn(5, 4))


def test_wrong_dtype(fast):
    with pytest.raises(ValueError, match="expected a float32 .* got a float64"):
        fast(torch.randn(2, 4, dtype=torch.float64))


def test_wrong_device(fast):
    with pytest.raises(ValueError, match="on cpu .* got .* on meta"):
        fast(torch.empty(2, 4, device="meta"))


def test_wrong_number_of_inputs(fast):
    with pytest.raises(ValueError, match="expected the arguments structured as at prepare"):
        fast(torch.randn(2, 4), torch.randn(2, 4))


def test_non_tensor_argument_changed():
    class Scaled(torch.nn.Module):
        def forward(self, x, k):
            return x * k

    fast = nimble.Nimble(Scaled()).prepare((torch.randn(2), 3))
    with pytest.raises(ValueError, match="expected 3 .* got 4"):
        fast(torch.randn(2), 4)


def test_call_before_prepare():
    with pytest.raises(nimble.NotPreparedError, match="before prepare"):
        nimble.Nimble(torch.nn.Linear(2, 2))(torch.randn(1, 2))


def test_mode_switch_after_prepare_is_refused():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout()).eval()
    fast = nimble.Nimble(model).prepare(torch.randn(1, 2), on_change="error")
    model.train()
    with pytest.raises(nimble.NotPreparedError, match=r"the model changed since prepare: the model.training \(train/eval mode\) changed"):
        fast(torch.randn(1, 2))


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # THE_BRANCH
            return x * 2
        return x


class UsesItem(torch.nn.Module):
    def forward(self, x):
        return x * x.max().item()


class UsesToList(torch.nn.Module):
    def forward(self, x):
        return x[: len([v for v in x.tolist() if v > 0])]


class UsesNonzero(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x)


class UsesMask(torch.nn.Module):
    def forward(self, x):
        return x[x > 0]


@pytest.mark.parametrize(
    "model, op, line",
    [
        (Branchy(), "aten._local_scalar_dense|aten.is_nonzero", "THE_BRANCH"),
        (UsesItem(), "aten._local_scalar_dense|aten.item", "x.max().item()"),
        (UsesToList(), "Tensor.tolist()", "x.tolist()"),
        (UsesNonzero(), "aten.nonzero", "torch.nonzero"),
        (UsesMask(), "aten.index.Tensor", "x[x > 0]"),
    ],
)
def test_value_dependent_model_is_refused(model, op, line):
    with pytest.raises(nimble.NotStaticError) as info:
        nimble.Nimble(model).prepare(torch.randn(6))
    message = str(info.value)
    assert __file__ in message
    assert line in message
    assert any(name in message for name in op.split("|"))


def test_unreplayable_op_is_refused_at_prepare():
    lib = torch.library.Library("nimble_test", "DEF")
    lib.define("double_it(Tensor x) -> Tensor")
    lib.impl("double_it", lambda x: x * 2, "CPU")

    class UsesPythonOp(torch.nn.Module):
        def forward(self, x):
            return torch.ops.nimble_test.double_it(x)

    with pytest.raises(nimble.UnsupportedOpError, match="nimble_test.double_it"):
        nimble.Nimble(UsesPythonOp()).prepare(torch.randn(3))


def test_module_reassigning_a_buffer_is_refused_and_left_intact():
    class Reassigns(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(2))

        def forward(self, x):
            self.total = self.total + x
            return self.total

    model = Reassigns()
    total = model.total
    with pytest.raises(nimble.UnsupportedOpError, match="replaced a parameter or buffer"):
        nimble.Nimble(model).prepare(torch.ones(2))
    # The buffer prepare's runs replaced is put back: the same tensor, still zero.
    assert model.total is total and dict(model.named_buffers()) == {"total": total}
    assert torch.equal(total, torch.zeros(2))


def test_a_lazy_module_not_yet_called_is_refused_naming_its_parameters():
    model = torch.nn.Sequential(torch.nn.LazyLinear(4), torch.nn.ReLU()).eval()
    with pytest.raises(ValueError, match=r"0\.weight, 0\.bias not initialized yet.*call the model once"):
        nimble.Nimble(model).prepare(torch.randn(2, 3))
    with torch.no_grad():
        model(torch.randn(2, 3))  # as the message says: then it prepares
    fast = nimble.Nimble(model).prepare(torch.randn(2, 3))
    x = torch.randn(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x))


def test_not_a_module():
    with pytest.raises(TypeError, match="wraps a torch.nn.Module, got function"):
        nimble.Nimble(lambda x: x)


def test_model_converted_after_prepare_is_refused():
    model = torch.nn.Linear(4, 3).eval()
    fast = nimble.Nimble(model).prepare(torch.randn(2, 4), on_change="error")
    model.double()
    with pytest.raises(nimble.StaleModelError, match=r"weight changed since prepare: it was float32 \[3, 4\] strides \[4, 1\] on cpu, it is float64 \[3, 4\]"):
        fast(torch.randn(2, 4))


def test_the_core_raises_nimble_errors(fast):
    from nimble import _C

    with pytest.raises(nimble.UnsupportedOpError, match="aten::no_such_op"):
        _C.ProgramBuilder().add_op("aten::no_such_op", "", [], [])
    with pytest.raises(nimble.NotStaticError, match="aten::_local_scalar_dense"):
        _C.ProgramBuilder().add_op("aten::_local_scalar_dense", "", [torch.tensor(2.0)], [2.0])
    with pytest.raises(nimble.errors.BadInputError, match="input 0: expected a float32") as info:
        fast._replay.run([torch.randn(5, 4)], True)
    assert isinstance(info.value, ValueError)  # as it was before the errors were typed
    with pytest.raises(nimble.errors.BadInputError, match="expected 0 scalar values, got 1"):
        fast._replay.set_scalars([1.0])


def test_prepare_keywords_are_checked_before_anything_runs():
    model = torch.nn.Linear(4, 4).eval()
    fast = nimble.Nimble(model)
    with pytest.raises(TypeError, match="'strems'; did you mean 'streams'"):
        fast.prepare(torch.randn(2, 4), strems=2)
    for bad, message in [(dict(streams=True), "streams must be"),
                         (dict(on_change="ignore"), "on_change must be one of"),
                         (dict(side_effects="quiet"), "side_effects must be one of"),
                         (dict(training=True, fold_batchnorm=True), "fold_batchnorm is an inference"),
                         (dict(loss_fn=torch.nn.functional.mse_loss), "whole-step mode needs")]:
        with pytest.raises(ValueError, match=message):
            fast.prepare(torch.randn(2, 4), **bad)
    assert fast._replay is None  # nothing was prepared
    # help() and editors see the keywords, spelled once in PrepareOptions
    keywords = inspect.signature(nimble.Nimble.prepare).parameters
    assert keywords["streams"].default == 1 and keywords["on_change"].default == "reprepare"


def test_the_builders_options_are_one_bound_type():
    """C++ reads prepare's options from one bound `_C.BuildOptions`, made by PrepareOptions;
    ProgramBuilder.finish takes it, and no keywords."""
    from nimble import _C
    from nimble.replay.prepare_options import PrepareOptions, with_changes

    options = PrepareOptions(streams=3, out_variant_max_bytes=64, drop_noop_ops=False,
                             precompute_views=False, _graph_twin=True).build_options()
    assert isinstance(options, _C.BuildOptions)
    assert (options.streams, options.out_variant_max_bytes, options.drop_noop_ops,
            options.precompute_views, options.graph_twin) == (3, 64, False, False, True)
    auto = PrepareOptions(streams="auto", training=True).build_options()
    assert auto.streams == 1 and not auto.lower_for_cpu and not auto.drop_noop_ops
    changed = with_changes(options, keep_aten_ops={2}, tuned_convolutions={"k": "v"})
    assert changed.keep_aten_ops == {2} and changed.tuned_convolutions == {"k": "v"}
    assert options.keep_aten_ops == set() and options.tuned_convolutions == {}  # a copy
    with pytest.raises(AttributeError, match="no field 'strems'"):
        with_changes(options, strems=2)
    with pytest.raises(TypeError):
        _C.ProgramBuilder().finish(streams=2)