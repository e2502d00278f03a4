# TEMPORARY shim until the safety helper lands
import numpy as np
class CheckFailed(Exception): pass
def random_feeds(model, shapes=None, seed=0):
    from onnx import helper
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits: continue
        tt = vi.type.tensor_type
        dims = list((shapes or {}).get(vi.name) or [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim])
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        feeds[vi.name] = rng.standard_normal(dims).astype(dtype) if np.issubdtype(dtype, np.floating) else rng.integers(0, 8, dims).astype(dtype)
    return feeds
def run_onnx(model, feeds):
    import onnxruntime as ort
    o = ort.SessionOptions(); o.log_severity_level = 4
    try:
        s = ort.InferenceSession(model.SerializeToString(), o, providers=["CPUExecutionProvider"])
        names = [x.name for x in s.get_outputs()]
        return dict(zip(names, s.run(None, feeds)))
    except Exception as e:
        raise CheckFailed(str(e).splitlines()[0])
def compare_outputs(got, want, rtol=1e-3, atol=1e-4):
    for k, b in want.items():
        if k not in got: raise CheckFailed(f"missing {k}")
        a = got[k]
        if a.shape != b.shape: raise CheckFailed(f"{k} shape {a.shape} vs {b.shape}")
        if np.issubdtype(b.dtype, np.floating):
            if (np.isfinite(b) & ~np.isfinite(a)).any(): raise CheckFailed(f"{k} nan")
            scale = max(1.0, float(np.abs(b[np.isfinite(b)]).max())) if b.size else 1
            err = np.abs(a.astype(np.float64) - b)
            if (err > atol*scale + rtol*np.abs(b)).any(): raise CheckFailed(f"{k} differs by {np.nanmax(err)}")
        elif not np.array_equal(a, b): raise CheckFailed(f"{k} differs")
def check_onnx(orig, opt, feeds_list, rtol=1e-3, atol=1e-4):
    for f in feeds_list:
        compare_outputs(run_onnx(opt, f), run_onnx(orig, f), rtol, atol)
