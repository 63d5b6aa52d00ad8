"""The published tables of ``shared/data`` as measurement tables (:mod:`ddlscope.validate.measurements`):
the Lambda PyTorch training benchmarks and NVIDIA DeepLearningExamples' ResNet-50 tables.

**DeepLearningExamples ResNet-50 v1.5** (``dle_tables/*.csv``, throughput in images/s; :func:`dle_measurements`):
DGX-1 16/32 GB -> ``dgx-1v`` with V100 SXM2 16/32 GB, DGX-2 -> ``dgx-2``, DGX A100 -> ``dgx-a100``
(:data:`ddlscope.validate.published.DLE_SYSTEMS`); FP32 -> ``fp32``, TF32 -> ``tf32``, AMP -> ``fp16``;
real ImageNet input (DALI decodes on the GPU; the decoded batch is the host-to-GPU copy charged);
NHWC activations for the 21.03 AMP rows (the table's ``configs.yml`` sets ``memory_format: nhwc``),
NCHW for the others; the optimizer a kernel per parameter (``optimizer_kernels = for_loop``: the
containers' PyTorch 1.3 and 1.9 predate the multi-tensor default of 2.0);
``source`` = the file, ``testbed`` = the system.

**Lambda** source: lambdal/deeplearning-benchmark, ``pytorch/`` (see the folder's SOURCES.md): NVIDIA
DeepLearningExamples PyTorch models run in NGC containers on one server of ``num_gpu`` GPUs,
data-parallel; one row per system, one column per model holding the whole server's training
throughput, and beside it the per-GPU batch size of each model (``pytorch-train-bs-*.csv``).

Conversion (:func:`lambda_measurements`), each choice with its reason:

- **Rows**: one measurement per (system, model, precision) with a throughput > 0 (a 0 means "not
  measured", SOURCES.md); ``gpus = num_gpu``, one server.
- **Batch**: ``pytorch-train-bs-*.csv`` holds the *server's* batch, although SOURCES.md says per GPU:
  every multi-GPU row is ``num_gpu`` times the same system's one-GPU row (one V100 48, two 96, four
  192, eight 384 for SSD), so ``batch_per_gpu = bs / num_gpu``.
- **GPU**: ``name_gpu`` without its GPU count and vendor (``"Dell 2x H100 80GB SXM5"`` -> ``"H100 80GB
  SXM5"``), resolved through the catalog's aliases; an unknown GPU is a rejected row naming it.
  ``testbed`` is the system without its GPU count (``"Dell H100 80GB SXM5"``): the same testbed's
  1 to 8 GPU rows.
- **Precision**: ``fp16`` = automatic mixed precision -> ``fp16``. ``fp32`` -> ``tf32``: NGC's PyTorch
  containers run FP32 training on TF32 tensor cores on Ampere and newer GPUs (cuDNN convolutions by
  PyTorch's default ``torch.backends.cudnn.allow_tf32 = True``; matmuls through the containers'
  ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``; NVIDIA, "Accelerating AI Training with NVIDIA TF32 Tensor
  Cores", 2021, and the NGC PyTorch release notes). On older GPUs the catalog's ``tf32`` peak is the
  FP32 one, so the same label is right there too.
- **Links** for multi-GPU rows (the data-parallel all-reduce): every Lambda benchmark runs with
  ``export NCCL_P2P_DISABLE=1`` (lambdal/deeplearning-benchmark ``pytorch/scripts/benchmark_pytorch.sh``,
  each ``benchmark_pytorch_*`` function), which turns off NCCL's P2P transport, NVLink included: the
  GPUs exchange through host memory (NCCL's SHM transport), so every system's all-reduce is priced on
  PCIe (``nvlink = none``: 3.0 for V100 and Quadro RTX, 4.0 for Ampere and Ada, 5.0 for "PCIe Gen5" and
  SXM5 H100 systems), on the :data:`~ddlscope.validate.measurements.DEFAULT_SERVER`
  layout. The multi-GPU rows are about communication (issue "communication fidelity"); the compute
  validation reads the one-GPU rows.
- **Models**: :data:`LAMBDA_MODELS` maps each benchmark to a zoo model, its throughput unit, input
  (``synthetic``: ResNet-50 runs on synthetic data, SOURCES.md) and sizes (BERT SQuAD fine-tuning:
  sequence length 384, the DLE default). :data:`LEFT_OUT` gives, for each benchmark not converted,
  why; its rows are counted as rejected with that reason. The multi-GPU rows of the benchmarks that Lambda runs as
  independent replicas (:data:`UNSYNCHRONISED_MULTI_GPU`: Transformer-XL) are rejected with reason
  ``not_synchronised``. Every rejected row's detail names its file and line.
- **GPU count**: ``num_gpu`` divides the server's batch only where it is a whole number >= 1; any other
  value is kept as written, so the checks reject the line's rows naming it.
- **NCF throughput**: DLE's ``ncf.py`` counts a whole epoch but trains only the splits it keeps, so the
  reported samples/s is converted to the samples trained (:func:`ncf_trained_samples_per_s`: 0.906-0.992
  on one GPU at Lambda's batches, 0.644 on eight at 8 M each).
- **Implausible rows**: a multi-GPU row above :data:`MAX_SCALING_EFFICIENCY` times its testbed's one-GPU
  throughput per GPU is rejected with reason ``implausible`` (SOURCES.md's NCF outliers).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import polars as pl

from ddlscope.specs.catalog import Catalog
from ddlscope.validate.measurements import MeasurementError, MeasurementTable, check_measurements, concat_tables

LAMBDA_MODELS: dict[str, dict[str, str]] = {
    "resnet50": {"model": "resnet50", "throughput_unit": "images/s", "input_data": "synthetic"},
    "bert_base_squad": {"model": "bert_base_squad", "throughput_unit": "sequences/s", "seq_len": "384",
                        "optimizer": "adam", "attention": "math", "amp": "o2"},
    "bert_large_squad": {"model": "bert_large_squad", "throughput_unit": "sequences/s", "seq_len": "384",
                         "optimizer": "adam", "attention": "math", "amp": "o2"},
    "ssd": {"model": "ssd300", "throughput_unit": "images/s"},
    "ncf": {"model": "ncf_dle", "throughput_unit": "samples/s", "optimizer": "adam"},
    "transformerxlbase": {"model": "transformer_xl_base_softmax", "throughput_unit": "tokens/s", "seq_len": "192",
                          "optimizer": "adam", "amp": "o2"},
    "transformerxllarge": {"model": "transformer_xl_large_softmax", "throughput_unit": "tokens/s",
                           "seq_len": "256", "optimizer": "adam", "amp": "o2"},
}
"""Lambda benchmark column -> measurement-table fields (DLE defaults: BERT SQuAD at sequence 384, trained
with Adam (``run_squad.py``: apex ``FusedAdam`` under AMP, ``BertAdam`` otherwise), AMP as apex
``amp.initialize(..., opt_level="O2", keep_batchnorm_fp32=False)`` (``amp = o2``: the model in FP16,
FP32 master weights) and attention as
DLE's ``modeling.py`` computes it, unfused (``BertSelfAttention.forward``: ``torch.matmul`` of queries
and keys, scale, mask, ``F.softmax``, dropout, ``torch.matmul`` with the values: ``attention = math``,
the ``L x L`` scores written and read by each step; NVIDIA/DeepLearningExamples
``PyTorch/LanguageModeling/BERT``); NCF on
MovieLens-20M, the zoo's ``ncf_dle``, trains with Adam; ResNet-50 on synthetic data; Transformer-XL's
tokens/s count ``seq_len`` target tokens per sample, 192 for base and 256 for large. Lambda's scripts
(lambdal/deeplearning-benchmark ``pytorch/scripts/config_v1/config_pytorch_*.sh``) call DLE's
``train.py`` with explicit flags and no ``--adaptive``, so the model has one softmax over all
267,735 words (``transformer_xl_*_softmax``); base with ``--optim jitlamb`` (LAMB keeps Adam's two
moments per parameter: priced as ``adam``, its per-tensor trust-ratio norms not counted), large with
``--optim adam``; AMP by ``train.py``'s defaults ``--amp apex``, ``--apex_amp_opt_level O2``:
``amp = o2``). The optimizer step launches a kernel per parameter (``optimizer_kernels = for_loop``:
Lambda's v1 runs use the ``pytorch:22.09-py3`` container, PyTorch 1.13, before ``torch.optim``'s
multi-tensor default of 2.0; the repository's ``pytorch/README.md``), except BERT's apex
``FusedAdam`` under AMP, a multi-tensor optimizer (``foreach``, :data:`MULTI_TENSOR_UNDER_AMP`)."""

MULTI_TENSOR_UNDER_AMP = frozenset({"bert_base_squad", "bert_large_squad"})
"""Lambda benchmarks whose AMP runs step a multi-tensor optimizer (``optimizer_kernels = foreach``):
DeepLearningExamples' ``run_squad.py`` takes apex's ``FusedAdam`` under AMP and its own per-parameter
``BertAdam`` otherwise."""

BERT_ADAM_IN_FP32 = frozenset({"bert_base_squad", "bert_large_squad"})
"""Lambda benchmarks whose FP32/TF32 runs step DeepLearningExamples' ``BertAdam`` (``run_squad.py``
without ``--fp16``; ``optimizer = bert_adam``, :class:`ddlscope.profile.optimizers.BertAdam`: a global
gradient norm, then 10-12 kernels per parameter) rather than ``torch.optim.Adam``."""

LEFT_OUT: dict[str, str] = {
    "gnmt": "tokens/s counts the real (unpadded) tokens of WMT16 sentence pairs, whose length varies per batch; "
    "the zoo's gnmt prices full 50-token pairs: no fixed units_per_sample",
    "tacotron2": "mel frames/s: frames per utterance vary with the LJSpeech batch",
    "waveglow": "audio samples/s: samples per utterance vary with the LJSpeech batch",
}
"""Lambda benchmarks not converted, with why (their rows are rejected with this reason)."""

UNSYNCHRONISED_MULTI_GPU: dict[str, str] = dict.fromkeys(
    ("transformerxlbase", "transformerxllarge"),
    "independent replicas that synchronise no gradients (Lambda runs train.py without --multi_gpu): "
    "not data-parallel training")
"""Lambda benchmarks whose multi-GPU rows are not data-parallel training, so not a communication
measurement: they are counted as rejected with reason ``not_synchronised`` and this detail; their
one-GPU rows are converted. Lambda's config passes DeepLearningExamples' Transformer-XL ``train.py``
no ``--multi_gpu``, and ``train.py`` wraps the model in ``DistributedDataParallel`` only for
``--multi_gpu ddp`` (else ``para_model = model``), so ``torch.distributed.launch`` starts independent
replicas whose tokens/s ``train.py`` sums; the 8x A100 80GB SXM4 log (lambdal/deeplearning-benchmark
``pytorch/results/8xA100_80GB_SXM4/PyTorch_transformerxlbase_FP32/``) prints ``multi_gpu=None``,
``world size: 8``."""

NCF_EPOCH_SAMPLES = 19_861_770 * (1 + 4)
"""Samples DeepLearningExamples' ``ncf.py`` counts in an epoch of MovieLens-20M: 19,861,770 training
ratings (the Lambda logs print ``input_size: 19861770``) with 4 negatives each (``negative_samples: 4``),
``epoch_samples = len(train_ratings) * (negative_samples + 1)``."""


def ncf_trained_samples_per_s(throughput: float, gpus: int, server_batch: int) -> float | None:
    """The samples per second a Lambda NCF row trained, from the throughput it reports.

    DeepLearningExamples' ``ncf.py`` reports ``epoch_samples / train_time`` with ``epoch_samples`` =
    :data:`NCF_EPOCH_SAMPLES`, but each rank trains on its share of the epoch, ``int(N / gpus)``
    samples, split into local batches of ``server_batch // gpus``, and drops the last split
    (``prepare_epoch_train_data``: "the last batch will almost certainly be smaller, drop it"), so
    an epoch trains ``steps = ceil(share / local batch) - 1`` steps of ``server_batch`` samples in
    ``N / throughput`` seconds (the epoch's data preparation, timed too, included). At Lambda's
    batches this matters: eight GPUs with 8 M samples each run one step of the 1.55 the throughput
    counts (the 8x A100 80GB SXM4 log: 0.30 s an epoch, 332 M "samples/s", 214 M trained); one GPU
    with 8 M runs 12 steps of 12.4 (0.967).

    Args:
        throughput: the reported samples/s of the whole server (> 0).
        gpus: GPUs of the run (>= 1).
        server_batch: the global batch, ``--batch_size`` (Lambda's batch-size file), samples.

    Returns:
        ``throughput x steps x server_batch / N`` (samples/s), or None where the split leaves no
        step (a local batch of more than the rank's share: nothing is trained).
    """
    share = int(NCF_EPOCH_SAMPLES / gpus)
    local = server_batch // gpus
    if local < 1:
        return None
    steps = -(-share // local) - 1
    if steps < 1:
        return None
    return throughput * steps * local * gpus / NCF_EPOCH_SAMPLES


_COUNT = re.compile(r"\s*\b\d+\s*x\s*", re.IGNORECASE)
_VENDOR = re.compile(r"^(LambdaCloud|DellTexas|Dell|SMC|1CC|RAIDZ1)\s+")


def _system_name(name_gpu: str) -> str:
    """The system without its GPU count: ``"Dell 2x H100 80GB SXM5"`` -> ``"Dell H100 80GB SXM5"``."""
    return re.sub(r"\s+", " ", _COUNT.sub(" ", name_gpu, count=1)).strip()


def _gpu_name(name_gpu: str) -> str:
    """The GPU of a Lambda system: its name without count and vendor (``"H100 80GB SXM5"``)."""
    return _VENDOR.sub("", _system_name(name_gpu))


def _links(gpu: str) -> tuple[str, str]:
    """(pcie, nvlink) link names for a Lambda system name (module docstring, "Links": NVLink unused,
    ``NCCL_P2P_DISABLE=1``)."""
    g = gpu.upper()
    if "H100" in g:
        return "pcie5-x16", "none"
    if "V100" in g or "RTX 8000" in g or ("RTX 6000" in g and "ADA" not in g):
        return "pcie3-x16", "none"
    return "pcie4-x16", "none"


def _ncf_trained(t: pl.DataFrame, thr_path: Path, precision: str, left: list[pl.DataFrame]) -> pl.DataFrame:
    """The NCF rows of one Lambda file with ``throughput`` replaced by the samples per second they
    trained (:func:`ncf_trained_samples_per_s`) where the row's throughput, GPU count and batch are
    numbers; rows whose split leaves no step are appended to ``left`` (reason ``no_step``); the
    others keep their values for the checks to reject with their reasons."""
    def num(v: str | None) -> float | None:
        try:
            x = float(v) if v is not None else None
        except ValueError:
            return None
        return x if x is not None and math.isfinite(x) else None

    trained, none_trained = [], []
    for thr, g, b in zip(t["throughput"], t["gpus"], t["batch_per_gpu"], strict=True):
        thr_f, g_f, b_f = num(thr), num(g), num(b)
        usable = (thr_f is not None and thr_f > 0 and g_f is not None and g_f >= 1 and g_f == int(g_f)
                  and b_f is not None and b_f > 0)
        rate = ncf_trained_samples_per_s(thr_f, int(g_f), round(b_f * g_f)) if usable else None
        trained.append(thr if rate is None else repr(rate))
        none_trained.append(usable and rate is None)
    t = t.with_columns(throughput=pl.Series(trained, dtype=pl.String), __none=pl.Series(none_trained))
    left.append(t.filter(pl.col("__none")).select(
        "line", source=pl.lit(f"lambda {precision}"), reason=pl.lit("no_step"),
        detail=pl.format(f"{thr_path}:{{}}: ncf with a batch of {{}} per GPU on {{}} GPUs: ncf.py's split of the "
                         f"epoch ({NCF_EPOCH_SAMPLES:,} samples) leaves no step", pl.col("line"),
                         pl.col("batch_per_gpu"), pl.col("gpus"))))
    return t.filter(~pl.col("__none")).drop("__none")


MAX_SCALING_EFFICIENCY = 2.0
"""A multi-GPU row whose throughput per GPU is more than this many times its testbed's one-GPU row
(same model and precision) is rejected (reason ``implausible``): synchronous data parallelism runs
each GPU's share at best at the one-GPU rate, and no cache or batch effect doubles it. SOURCES.md
flags such rows (NCF on 4 and 8 H100 SXM5, above 10^9 samples/s: 20-50 times one GPU)."""


def _drop_superlinear(t: pl.DataFrame, bench: str, thr_path: Path, precision: str,
                      left: list[pl.DataFrame]) -> pl.DataFrame:
    """``t`` (one benchmark of one Lambda file) without its multi-GPU rows above
    :data:`MAX_SCALING_EFFICIENCY` times the same testbed's one-GPU throughput per GPU; those are
    appended to ``left`` with their file:line and the factor."""
    rate = pl.col("throughput").cast(pl.Float64, strict=False)
    n = pl.col("gpus").cast(pl.Float64, strict=False)
    t = t.with_columns(__bed=pl.col("name_gpu").map_elements(_system_name, return_dtype=pl.String))
    one = t.filter(n == 1).group_by("__bed").agg(__one=rate.max())
    t = t.join(one, on="__bed", how="left").with_columns(__eff=rate / n / pl.col("__one"))
    bad = (n > 1) & (pl.col("__eff") > MAX_SCALING_EFFICIENCY)
    left.append(t.filter(bad.fill_null(False)).select(
        "line", source=pl.lit(f"lambda {precision}"), reason=pl.lit("implausible"),
        detail=pl.format(f"{thr_path}:{{}}: {bench} on {{}} GPUs measures {{}} times its testbed's one-GPU "
                         f"throughput per GPU (more than {MAX_SCALING_EFFICIENCY:g}: not synchronous data "
                         "parallelism; SOURCES.md's outliers)", pl.col("line"), pl.col("gpus"),
                         pl.col("__eff").round(1))))
    return t.filter(~bad.fill_null(False)).drop("__bed", "__one", "__eff")


def lambda_measurements(data_dir: str | Path, catalog: Catalog | None = None) -> MeasurementTable:
    """The Lambda tables of ``data_dir/lambda_benchmarks`` as one checked measurement table (module
    docstring). ``line`` is the line of the throughput file; ``source`` is ``lambda <precision>``,
    ``testbed`` the system without its GPU count.

    Raises:
        MeasurementError: a file missing, or a throughput file whose rows do not match its batch-size file.
    """
    folder = Path(data_dir, "lambda_benchmarks")
    parts, left, checked = [], [], []
    for precision, label in (("fp32", "tf32"), ("fp16", "fp16")):
        thr_path = folder / f"pytorch-train-throughput-{precision}.csv"
        bs_path = folder / f"pytorch-train-bs-{precision}.csv"
        for p in (thr_path, bs_path):
            if not p.is_file():
                raise MeasurementError(f"{p}: missing (see shared/data/lambda_benchmarks/SOURCES.md)")
        thr = pl.read_csv(thr_path, infer_schema=False).with_row_index("line", offset=2)
        bs = pl.read_csv(bs_path, infer_schema=False)
        if thr["name_gpu"].to_list() != bs["name_gpu"].to_list():
            raise MeasurementError(f"{thr_path} and {bs_path}: the systems (name_gpu) differ row by row")
        for bench in (*LAMBDA_MODELS, *LEFT_OUT):
            if bench not in thr.columns:
                raise MeasurementError(f"{thr_path}: no column {bench}")
            value = thr[bench].cast(pl.Float64, strict=False)
            gpus_text = thr["num_gpu"].str.strip_chars()
            gpus = gpus_text.cast(pl.Float64, strict=False)
            whole = gpus.is_finite() & (gpus >= 1) & (gpus == gpus.floor())
            # the file holds per-server totals: divided by a whole number of GPUs; any other num_gpu stays
            # as written, and the checks reject the row naming it
            batch_text = bs[bench].str.strip_chars()
            per_gpu = [x if not w else None if b is None else b / g
                       for b, x, g, w in zip(batch_text.cast(pl.Float64, strict=False), batch_text, gpus,
                                             whole.fill_null(False), strict=True)]
            t = pl.DataFrame({
                "line": thr["line"].cast(pl.Int64),
                "name_gpu": thr["name_gpu"],
                "gpus": pl.Series([str(int(g)) if w else x for g, x, w in zip(gpus, gpus_text, whole.fill_null(False),
                                                                                strict=True)], dtype=pl.String),
                "batch_per_gpu": pl.Series([b if b is None or isinstance(b, str) else str(int(b))
                                            if math.isfinite(b) and b == int(b) else str(b) for b in per_gpu],
                                           dtype=pl.String),
                "throughput": thr[bench],
                "value": value,
            })
            # an empty or 0 cell: Lambda did not run this model on this system (counted, not a row);
            # any other value, bad ones included, goes to the checks, which reject it with its reason
            empty = pl.col("throughput").str.strip_chars().fill_null("") == ""
            unmeasured = empty | (pl.col("value") == 0).fill_null(False)
            left.append(t.filter(unmeasured).select(
                "line", source=pl.lit(f"lambda {precision}"), reason=pl.lit("not_measured"),
                detail=pl.format(f"{thr_path}:{{}}: {bench} = {{}}: an empty or 0 cell (not measured on this system)",
                                 pl.col("line"), pl.col("throughput").fill_null("(empty)"))))
            t = t.filter(~unmeasured)
            if bench in LEFT_OUT:
                left.append(t.select("line", source=pl.lit(f"lambda {precision}"), reason=pl.lit("left_out"),
                                     detail=pl.format(f"{thr_path}:{{}}: {bench}: {LEFT_OUT[bench]}",
                                                      pl.col("line"))))
                continue
            if bench == "ncf":  # ncf.py's throughput counts the samples of the splits it drops too
                t = _ncf_trained(t, thr_path, precision, left)
            if bench in UNSYNCHRONISED_MULTI_GPU:
                multi = pl.col("gpus").cast(pl.Int64, strict=False).fill_null(1) > 1
                left.append(t.filter(multi).select(
                    "line", source=pl.lit(f"lambda {precision}"), reason=pl.lit("not_synchronised"),
                    detail=pl.format(f"{thr_path}:{{}}: {bench} on {{}} GPUs: {UNSYNCHRONISED_MULTI_GPU[bench]}",
                                     pl.col("line"), pl.col("gpus"))))
                t = t.filter(~multi)
            t = _drop_superlinear(t, bench, thr_path, precision, left)
            spec = LAMBDA_MODELS[bench]
            gpu = [_gpu_name(n) for n in t["name_gpu"]]
            links = [_links(g) for g in gpu]
            t = t.with_columns(
                gpu=pl.Series(gpu, dtype=pl.String),
                testbed=pl.Series([_system_name(n) for n in t["name_gpu"]], dtype=pl.String),
                pcie=pl.Series([x[0] for x in links], dtype=pl.String),
                nvlink=pl.Series([x[1] for x in links], dtype=pl.String),
                precision=pl.lit(label),
                source=pl.lit(f"lambda {precision}"),
                benchmark=pl.lit(bench),
                # PyTorch 1.13 (NGC 22.09): a kernel per parameter, but for BERT's FusedAdam under AMP
                optimizer_kernels=pl.lit("foreach" if bench in MULTI_TENSOR_UNDER_AMP and label == "fp16"
                                         else "for_loop"),
                **{k: pl.lit(v) for k, v in spec.items()},
            ).drop("value")
            if bench in BERT_ADAM_IN_FP32 and label != "fp16":  # run_squad.py's own BertAdam
                t = t.with_columns(optimizer=pl.lit("bert_adam"))
            parts.append(t)
        if parts:  # checked per file, so that a rejected row's detail names its file and line
            checked.append(check_measurements(pl.concat(parts, how="diagonal_relaxed"), thr_path, catalog))
        parts = []
    if not checked:
        raise MeasurementError(f"{folder}: no data row of a converted benchmark")
    table = concat_tables(checked)
    rejected = pl.concat([table.rejected, *left], how="diagonal_relaxed") if left else table.rejected
    return MeasurementTable(rows=table.rows, rejected=rejected.sort("source", "line"), path=str(folder))


def dle_measurements(data_dir: str | Path, catalog: Catalog | None = None) -> MeasurementTable:
    """The DeepLearningExamples ResNet-50 tables of ``data_dir/dle_tables`` as one checked measurement
    table (module docstring). ``line`` is the line of each file; ``source`` the file name.

    Raises:
        MeasurementError: no table, or a system or precision the mapping does not know (naming the file).
    """
    from ddlscope.validate.published import DLE_PRECISION, DLE_SYSTEMS

    folder = Path(data_dir, "dle_tables")
    files = sorted(folder.glob("*.csv"))
    if not files:
        raise MeasurementError(f"{folder}: no *.csv tables (see shared/data/dle_tables/SOURCES.md)")
    parts = []
    for path in files:
        t = pl.read_csv(path, infer_schema=False).with_row_index("line", offset=2)
        for col, known in (("system", DLE_SYSTEMS), ("precision", DLE_PRECISION)):
            bad = sorted(set(t[col]) - set(known))
            if bad:
                raise MeasurementError(f"{path}: {col}: unknown {bad}; expected one of {sorted(known)}")
        parts.append(t.select(
            pl.col("line").cast(pl.Int64),
            model=pl.lit("resnet50"),
            gpu=pl.col("system").replace_strict({k: v[1] for k, v in DLE_SYSTEMS.items()}),
            server=pl.col("system").replace_strict({k: v[0] for k, v in DLE_SYSTEMS.items()}),
            gpus=pl.col("gpus"),
            batch_per_gpu=pl.col("batch_per_gpu"),
            precision=pl.col("precision").replace_strict(DLE_PRECISION),
            throughput=pl.col("throughput_img_s"),
            throughput_unit=pl.lit("images/s"),
            # DLE 21.03's configs.yml runs AMP as memory_format nhwc; 19.10 and TF32/FP32 runs are NCHW
            conv_layout=pl.when(pl.lit("21.03" in path.name) & (pl.col("precision") == "AMP"))
            .then(pl.lit("nhwc")).otherwise(pl.lit("nchw")),
            optimizer_kernels=pl.lit("for_loop"),  # PyTorch 1.3 / 1.9 (NGC 19.10 / 21.03): torch.optim.SGD
            source=pl.lit(path.name),
            testbed=pl.col("system"),
        ))
    return check_measurements(pl.concat(parts), folder, catalog)
