"""The auto-tuner on a simulated model: DynaTune's bandit spreads tuning time over the
model's operators; prints progress, the latency curve and writes it as a PNG.
(`python -m nimble tune --simulate --compare` compares every scheduler.)"""

from nimble.tuning import curves
from nimble._C import tuning

report = tuning.simulate(
    scheduler="dynatune", seed=0, tasks=6, trials_per_task=200, database="tune.db",
    progress=lambda e: print(f"slot {e['slot']}: task {e['task']}, {e['trials']} trials, "
                             f"model {e['model_ms']:.2f} ms"),
)
print(f"model latency {report['initial_model_ms']:.2f} ms -> {report['final_model_ms']:.2f} ms")
curves.write_plot("tune.png", {"dynatune": report["curve"]}, title="simulated model")
db = tuning.TuningDatabase("tune.db")
print(f"{db.count()} measurements in tune.db; best per task via db.best(signature, device)")
