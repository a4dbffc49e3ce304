"""The replay API and the programs `Nimble.prepare` builds, in the order data flows through them:

    wrapper            Nimble: prepare, call, use_tuned, the public face
    prepare_options    prepare's keywords, spelled once, and the C++ builder's options
    pipeline           prepare's stages, capture to executor, in one place; the hand-over to C++
    structure          how example inputs and outputs are flattened and rebuilt
    capture            recording a model's ATen ops once (user_source: where in the user's code)
    build_replay       a captured part (Handover) given to the C++ program builder
    cuda_training      what a training prepare refuses before it captures (devices, autocast)
    inference          the inference program: one forward replay
    training           the training program of the paper's mode: forward + backward
    whole_step         the training program of a whole step, optimizer update included
    optimizer_scalars  the optimizer's step-dependent scalars, fed to a whole-step replay
    streams            choosing how many streams a replay runs on
    tunable            which prepared models take tuned kernels
    visualize          the program as a Graphviz graph or a Chrome trace
"""
