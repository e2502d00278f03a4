# TEMPORARY shim until the safety helper lands
class R: verdict="faster"; ratio=0.9; median_a=1.0; median_b=0.9; ci_low=0.8; ci_high=0.95; rounds=10
def compare_onnx(a, b, feeds, threads=2, time_cap=20.0): return R()
def compare_tvm(a, b, feeds, time_cap=20.0): return R()
