"""Export of graphs whose outputs coincide, and names for splicing (name_prefix).

Each exported model passes ``onnx.checker.check_model(full_check=True)`` and matches the
original in ONNX Runtime.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

pytest.importorskip("onnxruntime")

from test_export import W, import_relax, make_model, ort_run, roundtrip, vi, x_feed  # noqa: E402

import tvm  # noqa: E402
from tvm import relax  # noqa: E402

import taso_tvm  # noqa: E402
from taso_tvm.onnx_io.export import ExportError, export_relax  # noqa: E402


def _double_transpose_model():
    """t -> MatMul -> m; o1 = Transpose(Transpose(m)), o2 = Transpose(Transpose(m)) (inverse perms)."""
    nodes = [
        helper.make_node("MatMul", ["t", "w"], ["m"], name="MatMul_0"),
        helper.make_node("Transpose", ["m"], ["a1"], perm=[1, 2, 0], name="T_1"),
        helper.make_node("Transpose", ["a1"], ["o1"], perm=[2, 0, 1], name="T_2"),
        helper.make_node("Transpose", ["m"], ["a2"], perm=[2, 0, 1], name="T_3"),
        helper.make_node("Transpose", ["a2"], ["o2"], perm=[1, 2, 0], name="T_4"),
    ]
    return make_model(nodes, [vi("t", [2, 3, 4])], [vi("o1", [2, 3, 5]), vi("o2", [2, 3, 5])],
                      [W("w", [4, 5])], opset=13)


@relax.expr_functor.mutator
class _DropInversePermutes(relax.PyExprMutator):
    """permute_dims(permute_dims(x, p), q) with q∘p = id  ->  x (what a rewrite rule does)."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if getattr(call.op, "name", "") != "relax.permute_dims":
            return call
        inner = call.args[0]
        inner_call = self.lookup_binding(inner) if isinstance(inner, relax.Var) else None
        if inner_call is None or getattr(inner_call.op, "name", "") != "relax.permute_dims":
            return call
        p = [int(a) for a in inner_call.attrs.axes]
        q = [int(a) for a in call.attrs.axes]
        if [p[i] for i in q] == list(range(len(p))):
            return inner_call.args[0]
        return call


def _drop_inverse_permutes(mod):
    f = _DropInversePermutes().visit_expr(mod["main"])
    mod = tvm.IRModule({"main": f})
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))


def _returned_vars(mod):
    var2val = relax.analysis.get_var2val(mod["main"])
    ret = mod["main"].body.body
    if isinstance(ret, relax.Var) and isinstance(var2val.get(ret), relax.Tuple):
        ret = var2val[ret]
    fields = list(ret.fields) if isinstance(ret, relax.Tuple) else [ret]
    out = []
    for f in fields:
        while isinstance(f, relax.Var) and isinstance(var2val.get(f), relax.Var):
            f = var2val[f]
        out.append(f)
    return out


def test_both_outputs_become_the_same_tensor():
    m = _double_transpose_model()
    mod = _drop_inverse_permutes(import_relax(m))
    outs = _returned_vars(mod)
    assert len(outs) == 2 and outs[0].same_as(outs[1]), "the rewrite should make both outputs the MatMul"
    # through the public API, names from like=
    e = taso_tvm.export_onnx(mod, like=m)
    onnx.checker.check_model(e, full_check=True)
    assert [o.name for o in e.graph.output] == ["o1", "o2"]
    assert [i.name for i in e.graph.input] == ["t"]
    assert sorted(n.op_type for n in e.graph.node) == ["Identity", "MatMul"]
    x = x_feed([2, 3, 4])
    ref, got = ort_run(m, [x]), ort_run(e, [x])
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _func_returning(make_fields, names):
    bb = relax.BlockBuilder()
    x = relax.Var("t", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            fields = make_fields(bb, x)
            gv = bb.emit_output(relax.Tuple(fields))
        bb.emit_func_output(gv)
    return export_relax(bb.get(), output_names=names)


def test_outputs_that_are_inputs_constants_or_repeated():
    w = relax.const(np.arange(12, dtype=np.float32).reshape(3, 4))
    c = relax.const(np.full((2, 4), 3.0, np.float32))

    def fields(bb, x):
        m = bb.emit(relax.op.matmul(x, w), "lv")
        return [m, m, x, c, c, x, m]

    names = ["o1", "o2", "o3", "o4", "o5", "t", "o7"]
    e = _func_returning(fields, names)
    onnx.checker.check_model(e, full_check=True)
    assert [o.name for o in e.graph.output] == names
    x = x_feed([2, 3])
    o = ort_run(e, [x])
    mm = x @ np.arange(12, dtype=np.float32).reshape(3, 4)
    for k in (0, 1, 6):
        np.testing.assert_allclose(o[k], mm, rtol=1e-5)
    for k in (2, 5):
        np.testing.assert_array_equal(o[k], x)
    for k in (3, 4):
        np.testing.assert_array_equal(o[k], np.full((2, 4), 3.0, np.float32))


def test_output_named_like_an_input_must_be_that_input():
    def fields(bb, x):
        return [bb.emit(relax.op.negative(x), "lv")]

    with pytest.raises(ExportError, match="^cannot export: output name 't' is an input name"):
        _func_returning(fields, ["t"])
    with pytest.raises(ExportError, match="not distinct"):
        _func_returning(lambda bb, x: [x, x], ["a", "a"])


def test_single_output_that_is_the_input():
    bb = relax.BlockBuilder()
    x = relax.Var("t", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        bb.emit_func_output(x)
    e = export_relax(bb.get(), output_names=["y"])
    onnx.checker.check_model(e, full_check=True)
    assert [n.op_type for n in e.graph.node] == ["Identity"]
    x0 = x_feed([2, 3])
    np.testing.assert_array_equal(ort_run(e, [x0])[0], x0)


# ----------------------------------------------------------------------------- name_prefix
def _conv_model():
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="Conv_0"),
             helper.make_node("Relu", ["c"], ["r"], name="Relu_1"),
             helper.make_node("Split", ["r"], ["y0", "y1"], axis=1, name="Split_2"),
             helper.make_node("Add", ["y0", "y1"], ["y"], name="Add_3")]
    return make_model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8]), vi("r", [1, 8, 8, 8])],
                      [W("w", [8, 3, 3, 3]), W("b", [8], seed=2)], opset=13)


def test_name_prefix_makes_every_internal_name_unique_and_keeps_io():
    m = _conv_model()
    mod = import_relax(m)
    a = export_relax(mod, input_names=["x"], output_names=["y", "r"], name_prefix="taso_r3_", opset=13)
    onnx.checker.check_model(a, full_check=True)
    io = {"x", "y", "r"}
    assert [i.name for i in a.graph.input] == ["x"] and [o.name for o in a.graph.output] == ["y", "r"]
    internal = {t.name for t in a.graph.initializer} | {o for n in a.graph.node for o in n.output}
    internal |= {i for n in a.graph.node for i in n.input if i}
    assert all(nm.startswith("taso_r3_") for nm in internal - io), internal - io
    assert all(n.name.startswith("taso_r3_") for n in a.graph.node)
    x = x_feed([1, 3, 8, 8])
    for g, r in zip(ort_run(a, [x]), ort_run(m, [x])):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    # two regions with different prefixes share no internal name
    b = export_relax(mod, input_names=["x"], output_names=["y", "r"], name_prefix="taso_r4_", opset=13)
    names_b = {t.name for t in b.graph.initializer} | {o for n in b.graph.node for o in n.output}
    names_b |= {n.name for n in b.graph.node}
    names_a = internal | {n.name for n in a.graph.node}
    assert (names_a & names_b) <= io


def test_name_prefix_reaches_if_subgraphs():
    cond_then = helper.make_graph([helper.make_node("Relu", ["x"], ["t_out"])], "then", [], [vi("t_out", [3])])
    cond_else = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"])], "else", [], [vi("e_out", [3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=cond_then, else_branch=cond_else)]
    zero = onnx.numpy_helper.from_array(np.array(0, np.float32), "zero")
    m = make_model(nodes, [vi("x", [3])], [vi("y", [3])], [zero], opset=13)
    mod = import_relax(m)
    e = export_relax(mod, name_prefix="p_", output_names=["y"])
    onnx.checker.check_model(e, full_check=True)
    sub_nodes = [sn for n in e.graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH
                 for sn in a.g.node]
    assert sub_nodes and all(o.startswith("p_") for sn in sub_nodes for o in sn.output)
    for x in (np.array([1.0, -2.0, 3.0], np.float32), np.array([-1.0, -2.0, 0.5], np.float32)):
        np.testing.assert_allclose(ort_run(e, [x])[0], ort_run(m, [x])[0])


# ----------------------------------------------------------------------------- one-line errors
def test_errors_are_one_line_export_errors():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.cumprod(x, axis=1), "lv12")
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    with pytest.raises(ExportError) as ei:
        export_relax(bb.get())
    assert str(ei.value) == "cannot export relax.cumprod in binding 'lv12': no ONNX mapping"
    with pytest.raises(ExportError) as ei:
        export_relax(42)
    assert "\n" not in str(ei.value)


def test_roundtrip_helper_still_reports_names():
    # sanity of the helper shared with test_export on a model with two outputs
    roundtrip(_conv_model(), [x_feed([1, 3, 8, 8])])


def test_error_names_the_onnx_node_when_the_caller_knows_it():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.cumprod(x, axis=1), "lv12")
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    with pytest.raises(ExportError) as ei:
        export_relax(bb.get(), origins={"lv12": "CumProd_3"})
    assert str(ei.value) == ("cannot export relax.cumprod in binding 'lv12' (from ONNX node 'CumProd_3'): "
                             "no ONNX mapping")
    # opset refusals carry it too
    a = relax.Var("a", relax.TensorType((3,), "int8"))
    bb = relax.BlockBuilder()
    with bb.function("main", [a]):
        with bb.dataflow():
            s = bb.emit(relax.op.add(a, a), "lv5")
            gv = bb.emit_output(s)
        bb.emit_func_output(gv)
    with pytest.raises(ExportError, match=r"^cannot export relax\.add in binding 'lv5' \(from ONNX node 'Add_9'\) "
                                          r"at opset 13: "):
        export_relax(bb.get(), opset=13, origins={"lv5": "Add_9"})


def test_two_prefixed_regions_splice_into_one_valid_graph():
    # the whole model, and the same model cut in two regions at tensor 'mid'
    def conv_relu(inp, out, w, b):
        return [helper.make_node("Conv", [inp, w, b], [out + "_c"], pads=[1, 1, 1, 1]),
                helper.make_node("Relu", [out + "_c"], [out])]

    inits = [W("w1", [4, 3, 3, 3]), W("b1", [4], seed=1), W("w2", [4, 4, 3, 3], seed=2), W("b2", [4], seed=3)]
    whole = make_model(conv_relu("x", "mid", "w1", "b1") + conv_relu("mid", "y", "w2", "b2"),
                       [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])], inits, opset=13)
    r1 = make_model(conv_relu("x", "mid", "w1", "b1"), [vi("x", [1, 3, 8, 8])], [vi("mid", [1, 4, 8, 8])],
                    inits[:2], opset=13)
    r2 = make_model(conv_relu("mid", "y", "w2", "b2"), [vi("mid", [1, 4, 8, 8])], [vi("y", [1, 4, 8, 8])],
                    inits[2:], opset=13)
    plain = [export_relax(import_relax(r), opset=13, input_names=[r.graph.input[0].name],
                          output_names=[r.graph.output[0].name]) for r in (r1, r2)]
    names = [{t.name for t in e.graph.initializer} | {o for n in e.graph.node for o in n.output} for e in plain]
    assert (names[0] & names[1]) - {"mid"}, "without a prefix the regions' internal names collide"
    e1, e2 = [export_relax(import_relax(r), opset=13, input_names=[r.graph.input[0].name],
                           output_names=[r.graph.output[0].name], name_prefix=p)
              for r, p in ((r1, "taso_r1_"), (r2, "taso_r2_"))]
    merged = onnx.compose.merge_models(e1, e2, io_map=[("mid", "mid")])
    onnx.checker.check_model(merged, full_check=True)
    x = x_feed([1, 3, 8, 8])
    np.testing.assert_allclose(ort_run(merged, [x])[0], ort_run(whole, [x])[0], rtol=1e-4, atol=1e-5)
