"""torch.compile(model, backend="nimble"): `backend` prepares and replays each graph that
Dynamo hands over."""
