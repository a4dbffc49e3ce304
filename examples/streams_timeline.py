"""Spread googlenet's ops over CPU streams with Nimble's stream assignment, look at the
schedule, and write the op graph (DOT) and one replay's timeline (open it in
https://ui.perfetto.dev or chrome://tracing)."""

import torch
import torchvision

import nimble

model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False).eval()
example = torch.randn(1, 3, 64, 64)

fast = nimble.Nimble(model).prepare(example, streams=2)
schedule = fast.schedule
print(f"{fast.num_ops} ops on {schedule['logical_streams']} logical streams "
      f"({schedule['logical_syncs']} syncs), folded onto {schedule['physical_streams']} "
      f"physical streams ({schedule['physical_syncs']} syncs)")

x = torch.randn(1, 3, 64, 64)
with torch.no_grad():
    torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)

fast.to_dot("googlenet.dot")
fast.trace("googlenet_trace.json")
print("wrote googlenet.dot and googlenet_trace.json")

auto = nimble.Nimble(model).prepare(example, streams="auto")
print(f"streams='auto' chose {auto.replay.num_streams} stream(s) on this machine")
