"""Time the original, onnxslim's, onnxscript's and taso-tvm's files of the MiniLM-L6 cross-encoder at 256 in one alternating
run (ONNX Runtime, 2 threads, padded mask): python benchmarks/peers/time_other_peers.py, from the folder holding
cls_slim.onnx, cls_oxs.onnx (other_peers.py) and cls_taso.onnx (taso-tvm optimize)."""
import onnx, numpy as np
from taso_tvm.runtime.timing import compare_onnx_models
import os
P = os.path.expanduser("~/.cache/taso_tvm/peer_models/minilm_l6_cls_eager_op17.onnx")
rng = np.random.default_rng(0)
mask = np.ones((1,256), np.int64); mask[:, 224:] = 0
feeds = {"input_ids": rng.integers(0, 30000, (1,256)), "attention_mask": mask, "token_type_ids": rng.integers(0,2,(1,256))}
names = ["original", "onnxslim", "onnxscript", "taso"]
models = [onnx.load(p) for p in (P, "cls_slim.onnx", "cls_oxs.onnx", "cls_taso.onnx")]
t = compare_onnx_models(models, feeds, 2, 60.0, names)
for lat, r in zip(t.latencies[1:], t.ratios): print(lat.name, "speedup %.3f [%.3f, %.3f]" % (1/r.ratio, 1/r.ci[1], 1/r.ci[0]))
for i in (1, 2):
    b = t.between(i, 3); print("taso vs", names[i], "%.3f [%.3f, %.3f]" % (1/b.ratio, 1/b.ci[1], 1/b.ci[0]))
