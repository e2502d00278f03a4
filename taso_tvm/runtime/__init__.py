"""Running whole models: measuring and checking them, and building what runs elsewhere.

- `check`: the safety net (the optimized model computes what the original computes, one set of tolerances);
- `timing`: the interleaved whole-model latency comparison (the never-slower guard, benchmarks);
- `bundle`: the runtime-only TVM that travels to a GPU machine;
- `cuda_build`: CUDA libraries with cubins, built without a GPU.

Nothing here imports the rules, the cost models, the search or the passes; they (and the faces) import this.
"""
