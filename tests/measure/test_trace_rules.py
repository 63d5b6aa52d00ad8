"""Classification rules are data: built-in rules on real kernel names, user rules, rule errors."""

from __future__ import annotations

import polars as pl
import pytest
from kineto_fixture import MYSTERY, write_fixture

from ddlscope.measure.analysis import analyze_traces
from ddlscope.measure.rules import RulesError, classify_names, load_rules

# kernel names copied from the shared traces -> (class, kind, precision)
REAL_NAMES = {
    "volta_sgemm_64x64_nt": ("compute_bound", "gemm", "fp32"),
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>"
    "(cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1::Params)": ("compute_bound", "gemm", "tf32"),
    "cudnn_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1": ("compute_bound", "convolution", "fp32"),
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4":
        ("compute_bound", "convolution", "tf32"),
    "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>(float, float)":
        ("memory_bound", "normalization", "fp32"),
    "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long>()":
        ("memory_bound", "embedding", "fp16"),
    "void at::native::vectorized_elementwise_kernel<4, fbgemm_gpu::_float_to_hfp8_gpu(at::Tensor const&)>":
        ("memory_bound", "elementwise", "fp32"),
    "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float>(int)":
        ("memory_bound", "optimizer", "fp32"),
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float> > >()":
        ("memory_bound", "reduction", "fp32"),
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)":
        ("communication", "send_recv", "fp32"),
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": ("communication", "all_reduce", "fp32"),
    "Memcpy HtoD (Pageable -> Device)": ("data_io", "host_to_device", "fp32"),
    "Memcpy DtoD (Device -> Device)": ("device_copy", "device_to_device", "fp32"),
    "Memset (Device)": ("device_copy", "memset", "fp32"),
    "triton__0d1d2d3d4d5d6d7d8d9d10d11d12d13d14": ("memory_bound", "fused_triton", "fp32"),
    MYSTERY: ("unclassified", "unclassified", "fp32"),
}


def test_builtin_rules_on_real_kernel_names():
    got = classify_names(pl.Series(list(REAL_NAMES)), load_rules())
    for row in got.iter_rows(named=True):
        assert (row["class"], row["kind"], row["precision"]) == REAL_NAMES[row["name"]], row["name"]


def test_user_toml_rule_overrides_and_reclassifies(tmp_path):
    rules = tmp_path / "mine.toml"
    rules.write_text("[[kernel]]\npattern = '^mystery_kernel'\nclass = \"compute_bound\"\nkind = \"gemm\"\n")
    a = analyze_traces([write_fixture(tmp_path)], rules_files=[rules])
    r = a.breakdown.filter(pl.col("iteration") == 1).row(0, named=True)
    # the 4 us of mystery_kernel [92,96) move from unclassified to compute-bound: 20 + 4
    assert (r["compute_bound_us"], r["unclassified_us"]) == (24.0, 0.0)
    assert a.unclassified.height == 0


def test_user_csv_rules(tmp_path):
    rules = tmp_path / "mine.csv"
    rules.write_text("pattern,class,kind\n^mystery_kernel,memory_bound,custom_op\n")
    got = classify_names(pl.Series([MYSTERY]), load_rules(rules)).row(0, named=True)
    assert (got["class"], got["kind"]) == ("memory_bound", "custom_op")
    assert got["rule"] == f"{rules}#kernel1"


@pytest.mark.parametrize(("text", "message"), [
    ("[[kernel]]\npattern = 'gemm('\nclass = \"compute_bound\"\n", "[[kernel]] #1: pattern 'gemm(' is not a valid"),
    ("[[kernel]]\npattern = 'x'\nclass = \"fast\"\n", "[[kernel]] #1: class: expected one of compute_bound"),
    ("[[kernel]]\npattern = 'x'\nclass = \"communication\"\nkind = \"gossip\"\n",
     "[[kernel]] #1: kind: a communication rule's kind must be one of"),
    ("[[precision]]\npattern = 'x'\nprecision = \"fp8\"\n", "[[precision]] #1: precision: expected one of"),
    ("[[iteration_marker]]\npattern = 'x'\nmode = \"middle\"\n", "[[iteration_marker]] #1: mode: expected"),
    ("[[iteration_marker]]\npattern = 'x'\nmode = \"span\"\nwarmup_pattern = 'w('\n",
     "[[iteration_marker]] #1: warmup_pattern 'w(' is not a valid"),
    ("[[iteration_marker]]\npattern = 'x'\nmode = \"span\"\nwarmup_patern = 'w'\n",
     "[[iteration_marker]] #1: unknown field(s) ['warmup_patern']; expected name, pattern, mode"),
    ("[[precision]]\npattern = 'x'\nprecision = \"fp16\"\nkind = \"y\"\n",
     "[[precision]] #1: unknown field(s) ['kind']; expected pattern, precision"),
    ("[[collective]]\npattern = 'x'\nkind = \"all_reduce\"\n[[collective]]\npatern = 'y'\nkind = \"broadcast\"\n",
     "[[collective]] #2: unknown field(s) ['patern']"),
    ("[host]\ndataloader = 'x'\n", "[host]: unknown field(s) ['dataloader']; expected data_loader, synchronisation"),
    ("[host]\ndata_loader = 'a('\n", "[host]: data_loader 'a(' is not a valid regular expression"),
    ("[kernels]\n", "unknown section(s) ['kernels']"),
    ("[[kernel]\n", "not valid TOML"),
    ("[[kernel]]\npattern = 'x'\nclass = = 1\n", "not valid TOML: Invalid value (at line 3, column 9)"),
])
def test_bad_rules_name_the_file_and_rule(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(RulesError) as exc:
        load_rules(path)
    assert str(exc.value).startswith(str(path)) and message in str(exc.value)


def test_json_rules_file_read_like_toml(tmp_path):
    # the same document as JSON (read by specs.files.read_toml_or_json); errors name the file and the field
    path = tmp_path / "mine.json"
    path.write_text('{"kernel": [{"pattern": "^mystery_kernel", "class": "memory_bound", "kind": "custom_op"}]}')
    got = classify_names(pl.Series([MYSTERY]), load_rules(path)).row(0, named=True)
    assert (got["class"], got["kind"], got["rule"]) == ("memory_bound", "custom_op", f"{path}#kernel1")
    path.write_text('{"kernel": [{"pattern": "x", "class": "fast"}]}')
    with pytest.raises(RulesError, match=r"mine\.json: \[\[kernel\]\] #1: class: expected one of"):
        load_rules(path)
    path.write_text('[{"pattern": "x"}]')
    with pytest.raises(RulesError, match=r"mine\.json: expected a table of sections .*got a list"):
        load_rules(path)
    path.write_text('{"kernel": [}')
    with pytest.raises(RulesError, match=r"mine\.json: not valid JSON: .*line 1 column 13"):
        load_rules(path)
    with pytest.raises(RulesError, match=r"nothere\.toml: cannot read: No such file"):
        load_rules(tmp_path / "nothere.toml")


def test_bad_csv_rule_names_the_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("pattern,class,kind\nok,memory_bound,x\nbad,nonsense,x\n")
    with pytest.raises(RulesError, match=r"bad\.csv: line 3: class: expected one of"):
        load_rules(path)


@pytest.mark.parametrize(("text", "message"), [
    # the header declares kind: a row without it is refused like a bad class, with its line
    ("pattern,class,kind\nok,memory_bound,x\n^volta,compute_bound\n",
     r"short\.csv: line 3: kind: missing \(the header has 3 fields: pattern,class,kind; this row has 2\)"),
    ("pattern,class,kind\n^volta,compute_bound,\n", r"short\.csv: line 2: kind: missing"),
    ("pattern,class,kind\n\n\nok,memory_bound,x\n^volta\n", r"short\.csv: line 5: class: missing"),
    ("pattern,class,kind\nok,memory_bound,x,extra\n", r"short\.csv: line 2: 4 fields, the header has 3"),
])
def test_csv_rule_missing_a_field_names_the_line_and_field(tmp_path, text, message):
    path = tmp_path / "short.csv"
    path.write_text(text)
    with pytest.raises(RulesError, match=message):
        load_rules(path)


def test_csv_without_a_kind_column_defaults_kind_to_the_class(tmp_path):
    path = tmp_path / "two.csv"
    path.write_text("pattern,class\n^mystery_kernel,memory_bound\n")
    got = classify_names(pl.Series([MYSTERY]), load_rules(path)).row(0, named=True)
    assert (got["class"], got["kind"]) == ("memory_bound", "memory_bound")
