"""Training with nimble: the whole step (forward, loss, backward, AdamW update, a cosine
LR schedule) replayed as one program, checked step by step against eager PyTorch on a twin
model, then timed side by side."""

import copy
import time

import torch
import torchvision

import nimble

torch.manual_seed(0)
model = torchvision.models.mobilenet_v2(weights=None, num_classes=10).train()
twin = copy.deepcopy(model)  # the eager reference, from the same initial state
loss_fn = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
eager_optimizer = torch.optim.AdamW(twin.parameters(), lr=1e-3)
schedulers = [
    torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10) for o in (optimizer, eager_optimizer)
]

x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
fast = nimble.Nimble(model).prepare(
    x, training=True, loss_fn=loss_fn, optimizer=optimizer, example_targets=y
)

for step in range(10):
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    torch.manual_seed(step)  # the same dropout mask on both sides
    loss = fast.step(x, y)
    torch.manual_seed(step)
    eager_optimizer.zero_grad()
    expected = loss_fn(twin(x), y)
    expected.backward()
    eager_optimizer.step()
    for s in schedulers:
        s.step()
    assert torch.equal(loss, expected.detach()), (loss, expected)
    print(f"step {step}: loss {loss.item():.4f} (eager {expected.item():.4f}), lr {schedulers[0].get_last_lr()[0]:.2e}")
for p, q in zip(model.parameters(), twin.parameters()):
    assert torch.equal(p, q)
print("10 steps: parameters equal eager's bit for bit")


def timed(fn, runs=10):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[runs // 2] * 1e3


def eager_step():
    eager_optimizer.zero_grad()
    loss_fn(twin(x), y).backward()
    eager_optimizer.step()


eager_ms, nimble_ms = timed(eager_step), timed(lambda: fast.step(x, y))
print(f"one step: eager {eager_ms:.1f} ms, nimble {nimble_ms:.1f} ms ({eager_ms / nimble_ms:.2f}x)")
