"""``export_relax(mod, opset=N)``: a valid model at exactly opset N, or a one-line ExportError.

The light model-zoo models are exported at opsets 9 (their own), 11, 13, 17 and 18 and run in ONNX Runtime
next to the originals; op forms whose signature changed across opsets (Resize-11's required
roi/scales, RoiAlign's coordinate mode, Dropout's ratio, Softmax's axis semantics) are
checked on hand-built models; the whole node suite is swept over 7..21 in a slow test.
"""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")

from test_export import import_relax, make_model, opset_of, ort_run, vi, x_feed  # noqa: E402

from taso_tvm import zoo  # noqa: E402
from taso_tvm.onnx_io.export import ExportError, export_relax  # noqa: E402

SWEEP = (9, 11, 13, 17, 18)  # 9: the light models' own opset
# light models by import+export cost; the big ones (fully-connected weights) run with -m slow
_FAST = ("squeezenet", "shufflenet", "inception_v2")
_SLOW = ("densenet121", "resnet50", "inception_v1", "bvlc_alexnet", "vgg19", "zfnet512")
_cache: dict = {}


def _light(name):
    if name not in _cache:
        path = [p for p in zoo.light_models() if p.endswith(f"light_{name}.onnx")][0]
        model = zoo.load_light(path)
        feeds = zoo.random_inputs(model, seed=3)
        ref = ort_run(model, list(feeds.values()))
        _cache.clear()  # keep at most one model (and its weights) alive
        _cache[name] = (import_relax(model), feeds, ref)
    return _cache[name]


def _params():
    for name in _FAST + _SLOW:
        for v in SWEEP:
            marks = [pytest.mark.slow] if name in _SLOW else []
            yield pytest.param(name, v, marks=marks, id=f"{name}-opset{v}")


@pytest.mark.parametrize("name,opset", list(_params()))
def test_light_model_at_opset(name, opset):
    mod, feeds, ref = _light(name)
    e = export_relax(mod, opset=opset)
    assert opset_of(e) == opset
    onnx.checker.check_model(e, full_check=True)
    got = ort_run(e, list(feeds.values()))
    for a, b in zip(got, ref):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- op forms
RESIZE_FORMS = list(itertools.product(["nearest", "linear", "cubic"], ["asymmetric", "half_pixel", "align_corners"],
                                      [False, True]))


@pytest.mark.parametrize("mode,ctm,use_sizes", RESIZE_FORMS)
def test_resize_at_every_opset(mode, ctm, use_sizes):
    inits = [numpy_helper.from_array(np.array([], np.float32), "roi")]
    if use_sizes:
        inits.append(numpy_helper.from_array(np.array([1, 2, 10, 9], np.int64), "sizes"))
        ins = ["x", "roi", "", "sizes"]
    else:
        inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
        ins = ["x", "roi", "scales"]
    kw = dict(mode=mode, coordinate_transformation_mode=ctm)
    if mode == "nearest":
        kw["nearest_mode"] = "floor" if ctm == "asymmetric" else "round_prefer_floor"
    m = make_model([helper.make_node("Resize", ins, ["y"], **kw)], [vi("x", [1, 2, 5, 6])], [vi("y", None)],
                   inits, opset=13)
    mod = import_relax(m)
    x = x_feed([1, 2, 5, 6])
    ref = ort_run(m, [x])[0]
    for v in (11, 12, 13, 18, 19, 21):
        e = export_relax(mod, opset=v)
        onnx.checker.check_model(e, full_check=True)
        assert opset_of(e) == v
        if v <= 12:  # Resize-11: roi and scales are required inputs
            node = [n for n in e.graph.node if n.op_type == "Resize"][0]
            assert node.input[1] and node.input[2]
        np.testing.assert_allclose(ort_run(e, [x])[0], ref, rtol=1e-4, atol=1e-5)


def _roi_align_model(ctm):
    rois = numpy_helper.from_array(np.array([[0, 0, 9, 9], [0, 0, 4, 4], [4, 4, 9, 9]], np.float32), "rois")
    bidx = numpy_helper.from_array(np.array([0, 0, 0], np.int64), "bidx")
    node = helper.make_node("RoiAlign", ["x", "rois", "bidx"], ["y"], output_height=5, output_width=5,
                            sampling_ratio=2, spatial_scale=1.0, coordinate_transformation_mode=ctm)
    return make_model([node], [vi("x", [1, 2, 10, 10])], [vi("y", [3, 2, 5, 5])], [rois, bidx], opset=16)


def test_roi_align_half_pixel_after_output_half_pixel():
    # the two forms differ only in how the attribute is written; the validity cache must tell them apart
    x = x_feed([1, 2, 10, 10])
    for ctm, lowest in (("output_half_pixel", 13), ("half_pixel", 16)):
        m = _roi_align_model(ctm)
        e = export_relax(import_relax(m))
        onnx.checker.check_model(e, full_check=True)
        assert opset_of(e) == lowest
        np.testing.assert_allclose(ort_run(e, [x])[0], ort_run(m, [x])[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [11, 15, 16, 17, 21])
def test_roi_align_keeps_output_half_pixel_across_the_default_change(opset):
    m = _roi_align_model("output_half_pixel")
    mod = import_relax(m)
    e = export_relax(mod, opset=opset)
    onnx.checker.check_model(e, full_check=True)
    node = [n for n in e.graph.node if n.op_type == "RoiAlign"][0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    # RoiAlign-16 changed the default to half_pixel: from 16 on the mode must be explicit
    assert attrs.get("coordinate_transformation_mode") == (b"output_half_pixel" if opset >= 16 else None)
    x = x_feed([1, 2, 10, 10])
    np.testing.assert_allclose(ort_run(e, [x])[0], ort_run(m, [x])[0], rtol=1e-4, atol=1e-5)


def test_dropout_and_coerced_softmax_at_opset11():
    nodes = [helper.make_node("Dropout", ["x"], ["d"], ratio=0.3),
             helper.make_node("Softmax", ["d"], ["y"], axis=1)]
    m = make_model(nodes, [vi("x", [2, 7, 1, 1])], [vi("y", [2, 7, 1, 1])], opset=11)
    mod = import_relax(m)
    x = x_feed([2, 7, 1, 1])
    for v in (11, 12, 13):
        e = export_relax(mod, opset=v)
        onnx.checker.check_model(e, full_check=True)
        assert [n.op_type for n in e.graph.node] == ["Softmax"]
        np.testing.assert_allclose(ort_run(e, [x])[0], ort_run(m, [x])[0], rtol=1e-5, atol=1e-6)


def test_op_missing_at_requested_opset_is_one_line():
    m = make_model([helper.make_node("GridSample", ["x", "g"], ["y"], align_corners=1)],
                   [vi("x", [1, 1, 4, 4]), vi("g", [1, 3, 3, 2])], [vi("y", [1, 1, 3, 3])], opset=16)
    mod = import_relax(m)
    with pytest.raises(ExportError) as ei:
        export_relax(mod, opset=13)
    msg = str(ei.value)
    assert "\n" not in msg and "GridSample" in msg and "opset 13" in msg and "needs opset >= 16" in msg
    with pytest.raises(ExportError, match=r"^cannot export at opset 5: supported opsets are"):
        export_relax(mod, opset=5)


def test_int8_arithmetic_names_the_op_below_opset14():
    m = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                   [vi("a", [3], TensorProto.INT8), vi("b", [3], TensorProto.INT8)], [vi("y", [3], TensorProto.INT8)],
                   opset=14)
    mod = import_relax(m)
    with pytest.raises(ExportError, match=r"relax\.add .* at opset 13: ONNX Add\(tensor\(int8\), tensor\(int8\)\) "
                                          r"needs opset >= 14"):
        export_relax(mod, opset=13)
    assert opset_of(export_relax(mod, opset=14)) == 14


@pytest.mark.slow
def test_node_suite_at_every_opset_7_to_21():
    from onnx_opset_sweep import sweep

    res, swept, _ = sweep(range(7, 22))
    assert swept > 800
    for v, r in res.items():
        assert not r.bad, f"opset {v}: {r.bad[:5]}"
        assert all("\n" not in why and why.startswith("cannot export") for _, why in r.refused)
    assert len(res[21].ok) > 800 and len(res[13].ok) > 650 and len(res[11].ok) > 600


def test_broadcasting_max_needs_opset8():
    # Clip-6 becomes Max(x, 0) / Min(., 6): the scalar bound broadcasts, which Max-6 cannot do
    m = make_model([helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)], [vi("x", [2, 5])], [vi("y", [2, 5])],
                   opset=6)
    mod = import_relax(m)
    with pytest.raises(ExportError, match=r"at opset 7: ONNX Max\(tensor\(float\), tensor\(float\)\) needs opset >= 8"):
        export_relax(mod, opset=7)
    e = export_relax(mod, opset=8)
    onnx.checker.check_model(e, full_check=True)
    x = x_feed([2, 5]) * 8
    np.testing.assert_allclose(ort_run(e, [x])[0], np.clip(x, 0, 6))


@pytest.mark.parametrize("opset", [14, 17])
def test_a_reshape_keeping_trailing_dims_is_written_at_the_models_opset(opset):
    """A region's reshape written relative to its input (its trailing dims read from the input's shape at run time,
    `relative_reshape="trailing"`) of a bool tensor (RoBERTa's mask) at the model's opset: below 15, where Shape has
    no `start`, the dims are sliced from the whole shape (before, the export failed and the region stayed as it was)."""
    import onnxruntime as ort
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3, 4, 5), "bool"))
    with bb.function("main", [x]):
        y = bb.emit(relax.op.reshape(x, (6, 4, 5)))
        bb.emit_func_output(y)
    model = export_relax(bb.get(), opset=opset, input_names=["x"], relative_reshape="trailing")
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == opset
    feed = np.random.default_rng(0).random((2, 3, 4, 5)) > 0.5
    (got,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": feed})
    np.testing.assert_array_equal(got, feed.reshape(6, 4, 5))
