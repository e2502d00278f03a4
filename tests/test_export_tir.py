"""call_tir PrimFuncs of TVM's ONNX frontend exported back to ONNX (Pad reflect / edge / wrap).

Each model is imported with ``from_onnx``, exported, fully checked and run in ONNX Runtime
next to the original on random inputs (``roundtrip`` of test_export).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")

from test_export import import_relax, make_model, op_types, ort_run, roundtrip, vi, x_feed  # noqa: E402

from taso_tvm.onnx_io.export import ExportError, export_relax  # noqa: E402
from taso_tvm.onnx_io.export.tir_index import match_pad_axis, onnx_pad_map  # noqa: E402


def _calltir_names(mod):
    from tvm import relax

    names = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir":
            names.append(e.args[0].name_hint)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return names


def _pad_model(shape, pads, mode, opset, axes=None):
    inits = [numpy_helper.from_array(np.asarray(pads, np.int64), "pads")]
    ins = ["x", "pads"]
    if axes is not None:
        inits.append(numpy_helper.from_array(np.asarray(axes, np.int64), "axes"))
        ins += ["", "axes"]
    node = helper.make_node("Pad", ins, ["y"], mode=mode, name="Pad_7")
    return make_model([node], [vi("x", shape)], [vi("y", None)], inits, opset=opset)


PAD_CASES = [
    # shape, pads (begins + ends), mode
    ([6], [2, 3], "reflect"),
    ([6], [0, 5], "edge"),
    ([5, 7], [1, 0, 4, 6], "reflect"),
    ([5, 7], [3, 2, 0, 1], "edge"),
    ([1, 3, 4, 5], [0, 1, 2, 1, 0, 0, 1, 2], "reflect"),
    ([1, 3, 4, 5], [0, 0, 3, 3, 0, 0, 3, 3], "reflect"),
    ([1, 3, 4, 5], [0, 0, 1, 1, 0, 0, 1, 1], "edge"),
    ([2, 3, 4, 5], [1, 2, 0, 4, 0, 1, 7, 0], "edge"),
    ([1, 2, 3, 4, 5], [0, 0, 1, 2, 1, 0, 0, 2, 1, 3], "reflect"),
    ([1, 2, 3, 4, 5], [0, 1, 1, 0, 4, 0, 0, 2, 3, 0], "edge"),
    ([1, 1, 4, 5], [0, 0, 0, 0, 0, 0, 0, 0], "reflect"),  # no padding at all
    ([1, 4, 6, 6], [0, 0, -1, 2, 0, 0, 1, -2], "edge"),  # negative widths crop
    ([1, 4, 6, 6], [0, 0, -1, 2, 0, 0, 1, -2], "reflect"),
    ([3, 7], [-2, 0, 0, -3], "reflect"),
]


@pytest.mark.parametrize("shape,pads,mode", PAD_CASES)
def test_pad_reflect_edge_round_trip(shape, pads, mode):
    m = _pad_model(shape, pads, mode, opset=13)
    mod = import_relax(m)
    expect = {"reflect": "mirror_pad", "edge": "replicate_pad"}[mode]
    if any(pads):
        assert expect in _calltir_names(mod)
    e = roundtrip(m, [x_feed(shape)])
    if any(pads):
        assert op_types(e) == ["Pad"]
        attrs = {a.name: helper.get_attribute_value(a) for a in e.graph.node[0].attribute}
        assert attrs["mode"] == mode.encode()
        pads_name = e.graph.node[0].input[1]
        pads_out = [numpy_helper.to_array(t).tolist() for t in e.graph.initializer if t.name == pads_name]
        assert pads_out == [pads]


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_pad_reflect_at_older_and_newer_opsets(opset):
    m = _pad_model([1, 3, 6, 6], [0, 0, 2, 1, 0, 0, 1, 2], "reflect", opset=opset)
    e = roundtrip(m, [x_feed([1, 3, 6, 6])], opset=opset)
    assert e.opset_import[0].version == opset


def test_pad_with_axes_input_opset18():
    m = _pad_model([2, 5, 6], [1, 2, 3, 0], "edge", opset=18, axes=[1, -1])
    roundtrip(m, [x_feed([2, 5, 6])])


def test_pad_wrap_needs_opset19():
    m = _pad_model([1, 2, 4, 5], [0, 0, 2, 3, 0, 0, 1, 4], "wrap", opset=19)
    mod = import_relax(m)
    assert "circular_pad" in _calltir_names(mod)
    e = roundtrip(m, [x_feed([1, 2, 4, 5])])
    assert e.opset_import[0].version >= 19
    with pytest.raises(ExportError, match=r"^cannot export relax\.call_tir.*opset 17.*Pad.*needs opset >= 19"):
        export_relax(mod, opset=17)


def test_pad_int_tensor():
    m = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")],
                   [vi("x", [3, 4], TensorProto.INT64)], [vi("y", None, TensorProto.INT64)],
                   [numpy_helper.from_array(np.array([1, 2, 2, 1], np.int64), "pads")], opset=13)
    roundtrip(m, [np.arange(12, dtype=np.int64).reshape(3, 4)])


def test_pad_index_maps_are_exact():
    # edge on a size-1 axis: every width gives the same map, the smallest is chosen
    assert match_pad_axis("edge", np.zeros(5, np.int64), 1) == 0
    # reflect 2 before / 1 after on n=4: [2 1 0 1 2 3 2]
    f = onnx_pad_map("reflect", 4, 2, 7)
    assert f.tolist() == [2, 1, 0, 1, 2, 3, 2]
    assert match_pad_axis("reflect", f, 4) == 2
    # a map that is no ONNX mode (a shifted copy) is not matched
    assert match_pad_axis("reflect", np.array([1, 2, 3, 0]), 4) is None
    # reflect wider than the axis is not what ONNX Runtime implements
    assert onnx_pad_map("reflect", 3, 3, 6) is None


def test_reflect_pad_wider_than_axis_is_a_clear_error():
    # pads >= dim: TVM's mirror_pad reads out of its input; nothing in ONNX matches
    m = _pad_model([1, 1, 3, 3], [0, 0, 4, 0, 0, 0, 0, 0], "reflect", opset=13)
    mod = import_relax(m)
    with pytest.raises(ExportError) as ei:
        export_relax(mod)
    msg = str(ei.value)
    assert "\n" not in msg and "mirror_pad" in msg and "binding" in msg


@pytest.mark.parametrize("opset", [6, 10])
def test_clip6_constant_bounds_inside_the_primfunc(opset):
    # Clip-6..10 (min/max attributes, e.g. relu6 in older MobileNet exports): the frontend bakes
    # the bounds into single-input 'maximum'/'minimum' PrimFuncs
    m = make_model([helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)], [vi("x", [2, 5, 4])],
                   [vi("y", [2, 5, 4])], opset=opset)
    mod = import_relax(m)
    assert _calltir_names(mod) == ["maximum", "minimum"]
    x = x_feed([2, 5, 4]) * 8
    e = roundtrip(m, [x])
    assert op_types(e) == ["Max", "Min"]


def test_elementwise_primfunc_translation_refuses_broadcast():
    from tvm import relax, topi

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 1), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            # a single-input 'maximum' that broadcasts its input: not element-wise
            y = bb.emit_te(lambda t: topi.maximum(topi.broadcast_to(t, (3, 4)), 0.5), x,
                           primfunc_name_hint="maximum")
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    with pytest.raises(ExportError) as ei:
        export_relax(bb.get())
    assert "\n" not in str(ei.value) and "maximum" in str(ei.value)


# ----------------------------------------------------------------------------- resize1d (rank-3 Resize)
RESIZE1D = [(w, out, mode, ctm, nm)
            for (w, out) in ((8, 16), (5, 15), (8, 4), (8, 12))
            for mode, nm in (("linear", None), ("nearest", "round_prefer_floor"), ("nearest", "round_prefer_ceil"),
                             ("nearest", "floor"), ("nearest", "ceil"))
            for ctm in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")]


@pytest.mark.parametrize("w,out,mode,ctm,nm", RESIZE1D[::3] + [RESIZE1D[1], RESIZE1D[-1]])
def test_resize1d_round_trip(w, out, mode, ctm, nm):
    kw = dict(mode=mode, coordinate_transformation_mode=ctm)
    if nm:
        kw["nearest_mode"] = nm
    sizes = numpy_helper.from_array(np.array([2, 3, out], np.int64), "sizes")
    m = make_model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **kw)], [vi("x", [2, 3, w])],
                   [vi("y", [2, 3, out])], [sizes], opset=13)
    mod = import_relax(m)
    assert _calltir_names(mod) == ["resize1d"]
    e = roundtrip(m, [x_feed([2, 3, w])])
    assert op_types(e) == ["Resize"]
    e11 = roundtrip(m, [x_feed([2, 3, w])], opset=11)  # Resize-11: roi/scales filled with empty tensors
    assert e11.opset_import[0].version == 11


def test_resize_map_matches_only_resize_matrices():
    from taso_tvm.onnx_io.export import resize_map

    m = resize_map.resize1d_matrix(6, 12, "linear", "align_corners")
    assert resize_map.match(m) == dict(mode="linear", coordinate_transformation_mode="align_corners")
    assert resize_map.match(np.random.default_rng(0).random((12, 6))) is None
    # rows must sum to one for every mode (it is an interpolation)
    for c in resize_map.candidates():
        mm = resize_map.resize1d_matrix(7, 3, c["mode"], c["coordinate_transformation_mode"],
                                        c.get("nearest_mode", "round_prefer_floor"), c.get("cubic_coeff_a", -0.75),
                                        c.get("exclude_outside", 0))
        np.testing.assert_allclose(mm.sum(axis=1), 1.0, atol=1e-9)


# ----------------------------------------------------------------------------- symbolic (dynamic) axes
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_with_dynamic_batch_and_width(mode):
    # only the static axis (H) is padded; the symbolic ones must be proven to be plain copies
    m = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)], [vi("x", ["N", 3, 8, "W"])],
                   [vi("y", ["N", 3, 11, "W"])],
                   [numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 0, 2, 0], np.int64), "pads")], opset=19)
    mod = import_relax(m)
    e = export_relax(mod)
    onnx.checker.check_model(e, full_check=True)
    assert [d.dim_param for d in e.graph.input[0].type.tensor_type.shape.dim] == ["N", "", "", "W"]
    for n, w in ((1, 5), (3, 9)):
        x = x_feed([n, 3, 8, w], seed=n)
        np.testing.assert_allclose(ort_run(e, [x])[0], ort_run(m, [x])[0])


def test_symbolic_copy_proofs():
    from tvm import tirx

    from taso_tvm.onnx_io.export.tir_index import proves_identity

    n, v = tirx.Var("n", "int64"), tirx.Var("v", "int64")

    def i(k):
        return tirx.IntImm("int64", k)

    assert proves_identity(tirx.max(i(0), tirx.min(n - i(1), v)), v, n)  # edge clamp on an unpadded axis
    assert proves_identity(tirx.floormod(v + i(0), n), v, n)              # wrap on an unpadded axis
    assert not proves_identity(v + i(1), v, n)
    assert not proves_identity(tirx.floormod(v + i(1), n), v, n)
    assert not proves_identity(tirx.min(n - i(2), v), v, n)


def test_clip6_with_dynamic_batch():
    m = make_model([helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)], [vi("x", ["N", 5])], [vi("y", ["N", 5])],
                   opset=9)
    e = export_relax(import_relax(m))
    onnx.checker.check_model(e, full_check=True)
    for n in (1, 4):
        x = x_feed([n, 5], seed=n) * 8
        np.testing.assert_allclose(ort_run(e, [x])[0], np.clip(x, 0, 6))


def test_resize1d_with_dynamic_batch():
    sizes = numpy_helper.from_array(np.array([1, 1, 2], np.float32), "scales")
    m = make_model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")], [vi("x", ["N", 3, 6])],
                   [vi("y", ["N", 3, 12])], [sizes], opset=13)
    e = export_relax(import_relax(m))
    onnx.checker.check_model(e, full_check=True)
    for n in (1, 3):
        x = x_feed([n, 3, 6], seed=n)
        np.testing.assert_allclose(ort_run(e, [x])[0], ort_run(m, [x])[0], rtol=1e-5, atol=1e-6)
