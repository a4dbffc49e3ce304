"""The main demo: wrap torchvision's resnet18 in two lines, check the replay against eager
PyTorch, and print the speedup measured side by side."""

import torch
import torchvision

import nimble
from nimble.bench.cpu import COLUMNS, measure
from nimble.bench.report import print_table

model = torchvision.models.resnet18(weights=None).eval()  # random weights: nothing to download
example = torch.randn(1, 3, 64, 64)

fast = nimble.Nimble(model)  # line 1
fast.prepare(example)        # line 2

x = torch.randn(1, 3, 64, 64)
with torch.no_grad():
    expected = model(x)
torch.testing.assert_close(fast(x), expected)
print(f"replay matches eager on a fresh input ({fast.num_ops} ops replayed from C++)")

print_table([measure("torchvision:resnet18", batch=1, image_size=64, runs=50, warmup=10)], COLUMNS)
