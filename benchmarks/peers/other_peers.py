"""The other peers on one file: onnxscript's ORT fusions (optimize_for_ort) or onnxslim (run in the export venv:
    /tmp/venv-export/bin/python benchmarks/peers/other_peers.py IN.onnx onnxscript|onnxslim OUT.onnx)."""
import sys, onnx
src, kind, dst = sys.argv[1:4]
if kind == "onnxscript":
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort
    m = ir.load(src)
    m, counts = optimize_for_ort(m)
    ir.save(m, dst); print(counts)
else:
    import onnxslim
    onnx.save(onnxslim.slim(onnx.load(src)), dst)
