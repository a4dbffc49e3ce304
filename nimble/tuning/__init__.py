"""The Python side of the auto-tuner (the tuner itself is C++: tuning/, csrc/kernels/):

    tune         nimble.tune: tune a prepared model's kernels on this machine
    cli          `python -m nimble tune`
    models       tuning zoo models from the command line, and comparing schedulers on them
    workers      the command line's side of Ray workers and of the multi-model survey
    distributed  measuring on Ray workers (WorkerGroup, model descriptions)
    survey       Trimmer's model-level survey: several models tuned at once
    curves       a run's latency curve: read, printed, plotted
    cost         what a run cost: machine time and energy
"""
