"""The facet registry: every registered operator has every facet its packages require; a missing one is a clear
error naming the operator and the facet."""
import pytest

import taso_tvm.cost  # noqa: F401  (declares and registers the cost facets)
import taso_tvm.rules  # noqa: F401  (declares and registers the rules facets)
from taso_tvm.graph.ops import OPS, FacetMissing, declare_facet, facet, register_facet
from taso_tvm.graph.ops.facets import declared_facets, missing_facets, unknown_operators


def test_every_operator_has_every_required_facet():
    assert missing_facets() == []


def test_no_facet_is_registered_for_an_unknown_operator():
    assert unknown_operators() == []


def test_a_missing_facet_names_operator_and_facet():
    declare_facet("test.required_thing", "a thing the test package needs", required=lambda op: False)
    register_facet("add", "test.required_thing", 1)
    assert facet("add", "test.required_thing") == 1
    with pytest.raises(FacetMissing, match=r"operator 'conv2d' has no 'test.required_thing' facet"):
        facet("conv2d", "test.required_thing")
    with pytest.raises(ValueError, match="registered twice"):
        register_facet("add", "test.required_thing", 2)
    with pytest.raises(ValueError, match="not declared"):
        register_facet("add", "test.undeclared", 2)


def test_defaults_serve_operators_that_register_nothing():
    declare_facet("test.flag", "a flag with a default", default=False)
    register_facet("mul", "test.flag", True)
    assert facet("mul", "test.flag") is True and facet("sub", "test.flag") is False
    assert "test.flag" in declared_facets() and len(OPS) > 20
