"""Test configuration: TVM uses both cores; heavy tests are marked slow (run them with `pytest -m slow`).

Besides the `@pytest.mark.slow` decorations in the test files, the tests below are slow by node id: the heaviest of
the default suite as measured with `pytest --durations=0` on 2 cores (2-80 s each), whose ground the fast suite
covers with a smaller model, a sibling test or a sample of the same cases; with them out the default suite runs in
under 6 minutes there. A file name marks the whole file.
"""
import os
import sys

import pytest

os.environ.setdefault("TVM_NUM_THREADS", "2")
sys.path.insert(0, os.path.dirname(__file__))

SLOW = {
    "tests/test_schedule.py::test_zoo_kernels_all_matched_by_a_rule",  # every kernel of 8 zoo models scheduled
    "tests/test_tutorials.py::test_tutorial_runs[01_optimize_onnx]",  # the tutorials' steps have their own tests
    "tests/test_tutorials.py::test_tutorial_runs[05_rules]",
    "tests/test_tutorials.py::test_tutorial_runs[06_tvm_pipeline]",
    "tests/test_lift_lower.py::test_zoo_round_trip[resnet50]",  # light_squeezenet and seed_example stay
    "tests/test_lift_lower.py::test_zoo_round_trip[bert]",
    "tests/test_lift_lower.py::test_zoo_round_trip[squeezenet]",
    "tests/test_lift_lower.py::test_light_model_round_trip[light_bvlc_alexnet]",
    "tests/test_lift_lower.py::test_light_model_round_trip[light_shufflenet]",
    "tests/test_optimize.py::test_zoo_model_optimizes_to_the_same_function[resnet50]",  # squeezenet stays
    "tests/test_optimize.py::test_zoo_model_optimizes_to_the_same_function[bert]",  # real_models' bert stays
    "tests/test_optimize.py::test_zoo_model_optimizes_to_the_same_function[nasrnn]",
    "tests/test_fuzz_cli.py::test_fuzz_models",  # the settings and native-crash fuzzers stay
    "tests/test_axiomatic_perm.py::test_every_3d_pair_is_proven_exactly_when_true",  # the 4-d samples stay
    "tests/test_rules_generate.py::test_generated_rules_match_and_apply_on_a_zoo_model",
    "tests/test_rules_generate_heads.py::test_max_ops_2_finds_heads_rules_that_match_at_bert_sizes",
    "tests/test_rules_generate_heads.py::test_max_ops_2_writes_only_verified_heads_rules",
    "tests/test_rules_generate_heads.py::test_a_rule_true_only_at_the_enumeration_head_count_is_refuted",
    "tests/test_rules_generate_heads.py::test_head_count_is_free_or_tied_to_the_heads_axis_it_must_equal",
    "tests/test_cuda_package.py",  # test_cli_model's CUDA build without a GPU stays
    "tests/test_zoo.py::test_light_model_randomized_and_runs[vgg19]",
    "tests/test_incremental.py::test_rewrite_node_set_equals_traversal[nasrnn]",
    "tests/test_incremental.py::test_component_partition_equals_whole_graph_fuseops[nasrnn]",
    "tests/test_cost_tvm.py::test_measure_through_rpc_tracker_and_server",
    "tests/test_export.py::test_zoo_models[nasnet_a]",
    "tests/test_export.py::test_zoo_models[inception_v3]",
    "tests/test_export.py::test_zoo_models[resnext50]",
    "tests/test_export.py::test_light_models[inception_v1]",
    "tests/test_export.py::test_light_models[densenet121]",
    "tests/test_export.py::test_light_models[resnet50]",
    "tests/test_export.py::test_zoo_models[resnet50]",
    "tests/test_export.py::test_light_models[inception_v2]",
    "tests/test_incremental.py::test_rewrites_reuse_the_parents_components[nasrnn]",
    "tests/test_onnx_node_suite.py::test_onnx_backend_node_suite_sample",  # 19 s of onnx generating its cases
    "tests/test_lift_lower.py::test_light_model_round_trip[light_squeezenet]",
    "tests/test_optimize.py::test_zoo_model_optimizes_to_the_same_function[squeezenet]",  # _returns_the_same_kind
    # the guard's rejection of a slower result: test_onnx_opt's folding-alone and onnxsim-candidate tests stay
    "tests/test_onnx_opt.py::test_a_cost_model_that_prefers_slower_graphs_is_caught",
    "tests/test_bench.py::test_bench_times_every_variant_of_a_file",
    "tests/test_reliability_interrupt.py::test_real_sigint_to_the_process_group_during_kernel_builds",
    "tests/test_zoo.py::test_light_model_randomized_and_runs[zfnet512]",
    "tests/test_export_opsets.py::test_light_model_at_opset[inception_v2-opset9]",
    "tests/test_cost_fusion.py::test_zoo_kernels_agree_with_fuseops[resnet50-kw1]",
    "tests/test_lift_lower.py::test_zoo_round_trip[nasrnn]",
    "tests/test_rules_generate.py::test_units_give_every_graph_once_in_run_order",
    "tests/test_cost_tvm.py::test_a_build_worker_that_dies_fails_no_kernel",  # the interrupt tests' workers stay
    # nasrnn's case stays
    "tests/test_egraph_search.py::test_pass_with_the_egraph_computes_the_original_in_ort[squeezenet-kwargs0]",
    "tests/test_bench_peers.py::test_one_row_on_the_committed_bert",  # the failing-tool row stays
    "tests/test_fused_rules.py::test_standard_ops_output_has_only_the_default_domain",  # test_fused_ops' stay
    "tests/test_external_data.py::test_optimize_into_the_models_own_folder",  # ..._into_another_folder stays
}


@pytest.hookimpl(tryfirst=True)  # before `-m 'not slow'` deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        nodeid = item.nodeid.replace(os.sep, "/")
        if nodeid in SLOW or nodeid.split("[")[0] in SLOW or nodeid.split("::")[0] in SLOW:
            item.add_marker(pytest.mark.slow)
