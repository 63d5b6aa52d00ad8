"""Expert parallelism in 3d (ep from the data-parallel group): all-to-all bytes and messages, expert
state / ep, expert gradients over dp/ep replicas; by hand. Plus the dense regression and the plan."""

import json

import polars as pl
import pytest
from pydantic import ValidationError

from ddlscope.model.arch_costs import context
from ddlscope.model.jobs import ARCHITECTURE_OPTION_COLUMNS, job_row, jobs_frame
from ddlscope.model.pipeline import pipeline_terms
from ddlscope.model.plan import PlanSpace, placements, search
from ddlscope.model.step_time import breakdown
from ddlscope.profile.llm import MIXTRAL_8X7B, DecoderConfig, decoder_workload
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.workload import Workload

# 1e9 parameters of which N_e = 8e8 in the experts (8 experts, top-2), bf16 gradients S = 2e9 (S_e = 1.6e9),
# 8 layers, A = 1e8 bytes per layer and micro-batch; peak = U = (2 + 12) 1e9 + 2e9 = 16e9 plus 8e9 activations
MOE = Workload(name="moe", batch_size=1, precision="bf16", compute_bound_flops=1e15, memory_bound_bytes=0.0,
               dense_param_bytes=2e9, num_gradient_tensors=10, num_params=1e9, num_layers=8,
               layer_activation_bytes=1e8, peak_memory_bytes=24e9, num_experts=8, experts_per_token=2,
               expert_params=8e8)
SYSTEM = builtin_catalog().system("dgx-a100")  # 8 GPUs per server, NVLink 3, 8 NICs


def _row(w: Workload, a: Architecture) -> dict:
    return breakdown(jobs_frame([job_row(w, a, SYSTEM, overlap="none")])).row(0, named=True)


def _needed(w: Workload, a: Architecture) -> float:
    """The GPU memory the 3d cost function says one GPU needs (bytes)."""
    jobs = jobs_frame([job_row(w, a, SYSTEM)])
    jobs = jobs.with_columns(**{k: pl.lit(None, t) for k, (t, _) in ARCHITECTURE_OPTION_COLUMNS.items()
                                if k not in jobs.columns})
    ctx = context(p=pl.lit(float(a.num_gpus)), g=pl.lit(8.0), k=pl.col("num_gradient_tensors").cast(pl.Float64),
                  S=pl.col("dense_param_bytes"), nics=pl.lit(8.0), needed=pl.col("peak_memory_bytes"))
    return jobs.select(pipeline_terms(ctx)["needed"]).item()


def test_alltoall_inside_a_server_by_hand():
    # tp 2, dp 16 (4 data-parallel ranks per server), ep 4: the EP group is the server's 4 dp ranks
    a = Architecture(kind="3d", num_workers=32, tp=2, ep=4, microbatches=4)
    row = _row(MOE, a)
    # 4 M L / pp = 128 all-to-alls of X = k A / (tp cp) = 1e8, (ep-1)/ep = 3/4 of it, 3 messages each
    a2a = 128 * 1e8 * 3 / 4
    tp = 128 * (2 * 1 / 2 * 1e8)            # the TP all-reduces of A over tp = 2
    dense_intra = 2 * 3 / 4 * 2e8           # (S - S_e) / tp = 2e8 over the server's 4 replicas
    assert row["nvlink_bytes"] == pytest.approx(tp + dense_intra + a2a)
    # NICs: the dense rings of 4 servers (2 per server), the experts' S_e / (ep tp) = 2e8 over dp/ep = 4 servers,
    # one copy per server of each of the 8 shards (8 rings); no all-to-all leaves the server
    assert row["network_bytes"] == pytest.approx((2 * 2 * 3 / 4 * 2e8 + 8 * 2 * 3 / 4 * 2e8) / 8)
    beta = row["nvlink_bandwidth_bytes_per_s"] * row["nvlink_link_efficiency"]
    # messages: TP 128 x 2, dense DP 10 x 6, all-to-all 128 x 3 (the experts' ring has one member per server)
    assert row["nvlink_s"] == pytest.approx((256 + 60 + 384) * row["nvlink_latency_s"] + row["nvlink_bytes"] / beta)
    nic_beta = row["nic_bandwidth_bytes_per_s"] * row["nic_link_efficiency"]
    assert row["network_s"] == pytest.approx((60 + 60) * row["nic_latency_s"] + row["network_bytes"] / nic_beta)
    # compute is EP's to share, not to cut: same as ep = 1
    one = _row(MOE, Architecture(kind="3d", num_workers=32, tp=2, microbatches=4))
    assert row["compute_bound_s"] == one["compute_bound_s"]
    assert one["nvlink_bytes"] == pytest.approx(tp + 2 * 3 / 4 * 1e9)  # ep = 1: experts reduced with the rest
    assert row["samples_per_s"] == pytest.approx(64 / row["step_s"])  # b M dp = 1 x 4 x 16


def test_alltoall_across_servers_by_hand():
    # tp 4 x pp 2 fill a server, dp 4 = ep 4: each EP peer in another server, all the all-to-all on the NICs
    a = Architecture(kind="3d", num_workers=32, tp=4, pp=2, ep=4, microbatches=4)
    row = _row(MOE, a)
    a2a = 64 * (2 * 1e8 / 4) * 3 / 4    # 4 M L/pp = 64 of X = k A / tp = 5e7, 3/4 of it, per GPU
    dense = 8 * 2 * 3 / 4 * (4e8 / 8)   # (S - S_e) / (tp pp) over 4 servers, 8 rings per server
    # the experts: dp / ep = 1 replica of each shard, nothing to reduce
    assert row["network_bytes"] == pytest.approx((dense + 8 * a2a) / 8)
    assert row["nvlink_bytes"] == pytest.approx(64 * 2 * 3 / 4 * 1e8 + 2 * 4 * 1e8 / 4)  # TP + PP sends
    nic_beta = row["nic_bandwidth_bytes_per_s"] * row["nic_link_efficiency"]
    # messages: dense ring 10 x 6, all-to-all 64 x 3
    assert row["network_s"] == pytest.approx((60 + 192) * row["nic_latency_s"] + row["network_bytes"] / nic_beta)


def test_expert_state_divided_by_ep():
    # U = 16e9, the experts' U_e = 14 x 8e8 + 1.6e9 = 12.8e9; activations 8e9 / tp
    for ep, expected in ((1, 16e9 / 2 + 8e9 / 2), (2, (16e9 - 12.8e9 / 2) / 2 + 4e9),
                         (4, (16e9 - 12.8e9 * 3 / 4) / 2 + 4e9), (8, (16e9 - 12.8e9 * 7 / 8) / 2 + 4e9)):
        assert _needed(MOE, Architecture(kind="3d", num_workers=32, tp=2, ep=ep, microbatches=4)) == \
            pytest.approx(expected)
    # with pp: the state over tp pp = 8 as well: 2.8e9 = (16e9 - 9.6e9) / 8 + 8e9 / 4
    assert _needed(MOE, Architecture(kind="3d", num_workers=32, tp=4, pp=2, ep=4, microbatches=4)) == \
        pytest.approx(2.8e9)


def test_ep_rules():
    with pytest.raises(ValidationError, match="expected ep to divide dp = 4"):
        Architecture(kind="3d", num_workers=32, tp=4, pp=2, ep=8)
    with pytest.raises(ValidationError, match="only 3d is model-parallel"):
        Architecture(kind="fsdp", num_workers=8, ep=2)
    dense = MOE.model_copy(update={"num_experts": None, "experts_per_token": None, "expert_params": None})
    with pytest.raises(ValueError, match="workload 'moe' has no experts"):
        job_row(dense, Architecture(kind="3d", num_workers=32, tp=2, ep=2), SYSTEM)
    six = MOE.model_copy(update={"num_experts": 6})
    with pytest.raises(ValueError, match="expected a divisor of the workload's num_experts = 6, got ep=4"):
        job_row(six, Architecture(kind="3d", num_workers=32, tp=2, ep=4), SYSTEM)
    with pytest.raises(ValidationError, match="a mixture of experts gives all three"):
        Workload(name="x", batch_size=1, compute_bound_flops=1.0, memory_bound_bytes=0.0, num_experts=8)
    with pytest.raises(ValidationError, match="experts_per_token: expected <= num_experts = 2"):
        Workload(name="x", batch_size=1, compute_bound_flops=1.0, memory_bound_bytes=0.0, num_experts=2,
                 experts_per_token=3, expert_params=0.0)


LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
         "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "hidden_act": "silu",
         "max_position_embeddings": 4096}


def test_dense_ep1_unchanged():
    """Llama-2-7B (micro-batch 1, full recomputation, totals path) as 3d on dgx-a100: the traffic figures
    of the commit before expert parallelism (05cfde5), exactly; ep = 1 given or not, the same row. The
    step times are those of 05cfde5 plus the FP32 cross-entropy's cast and ``nll_loss`` backward rows
    (``profile/llm.py``, added later: 16 bytes per logit)."""
    w, _ = decoder_workload(DecoderConfig.from_hf(LLAMA, seq_len=4096), 1, recompute="full")
    before = {
        (32, 4, 1, 2, 1): (51808043008.0, 5053811712.0, 0.26880840100483094, 0.210872488, 3.3471425348218755),
        (64, 2, 2, 4, 2): (15032385536.0, 6432984576.0, 0.07684421998067635, 0.268830024, 1.8252225963531834),
    }
    for (n, tp, cp, pp, v), figures in before.items():
        a = Architecture(kind="3d", num_workers=n, tp=tp, cp=cp, pp=pp, virtual_stages=v, microbatches=16)
        rows = breakdown(jobs_frame([job_row(w, a, SYSTEM), job_row(w, a.model_copy(update={"ep": 1}), SYSTEM)]))
        for r in rows.iter_rows(named=True):
            assert (r["nvlink_bytes"], r["network_bytes"], r["nvlink_s"], r["network_s"], r["step_s"]) == figures


def test_plan_space_enumerates_ep():
    mixtral = DecoderConfig.from_hf(MIXTRAL_8X7B, seq_len=4096)
    one = PlanSpace(micro_batches=(1,), recomputes=("full",), virtual_stages=(1,), context_parallel=(1,),
                    architectures=("3d",), tps=(2,), pps=(1,))
    # dp = 32: ep in the divisors of 32 that divide the 8 experts
    assert placements(mixtral, 64, 8, 512, one)["ep"].to_list() == [1, 2, 4, 8]
    # dp = 2 (tp 8 x pp 4): ep 1 or 2
    two = PlanSpace(**{**one.__dict__, "tps": (8,), "pps": (4,)})
    assert placements(mixtral, 64, 8, 512, two)["ep"].to_list() == [1, 2]
    dense = DecoderConfig.from_hf(LLAMA, seq_len=4096)
    assert set(placements(dense, 64, 8, 512)["ep"].to_list()) == {1}


def test_plan_mixtral_on_64_gpus():
    mixtral = DecoderConfig.from_hf(MIXTRAL_8X7B, seq_len=4096, name="mixtral-8x7b")
    space = PlanSpace(micro_batches=(1, 2), context_parallel=(1,), virtual_stages=(1,))
    ranked, t = search(mixtral, 64, SYSTEM, 512, space=space)
    three = ranked.filter(pl.col("architecture") == "3d")
    assert set(three["ep"].to_list()) == {1, 2, 4, 8}
    assert t["plans"] == ranked.height
    # at the same (tp, pp, micro-batch, recompute) ep 8 needs less memory than ep 1: some fit only with EP
    key = ["tp", "pp", "micro_batch", "recompute"]
    fits = three.group_by([*key, "ep"]).agg(pl.col("fits_gpu_memory").first())
    by_ep = fits.pivot(on="ep", index=key, values="fits_gpu_memory")
    assert by_ep.filter(pl.col("8") & ~pl.col("1")).height > 0
    assert by_ep.filter(pl.col("1") & ~pl.col("8")).height == 0


def test_cli_plan_and_predict_mixtral():
    from typer.testing import CliRunner

    from ddlscope.cli.main import app

    runner = CliRunner()
    res = runner.invoke(app, ["plan", "mixtral-8x7b", "--gpus", "64", "--global-batch", "512", "--seq-len", "4096",
                              "--format", "json", "--top", "50"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert len(out["rows"]) == 50 and all("ep" in r for r in out["rows"]) and out["plans"] > 50
    res = runner.invoke(app, ["plan", "mixtral-8x7b", "--gpus", "64", "--global-batch", "512", "--top", "3"],
                        terminal_width=250)
    assert res.exit_code == 0, res.output
    assert "mixtral-8x7b (46.7 B parameters, 12.9 B active, 8 experts, top-2), 64 x A100" in res.output
    res = runner.invoke(app, ["predict", "--model", "mixtral-8x7b", "--seq-len", "4096", "-a", "3d", "-w", "64",
                              "-s", "dgx-a100", "--parallel", "tp=2,pp=4,ep=8,microbatches=16"])
    assert res.exit_code == 0, res.output
    assert "mixtral-8x7b/mb1/none | 3d: 64 GPU(s) on 8 server(s)" in res.output
    res = runner.invoke(app, ["predict", "--model", "mixtral-8x7b", "-a", "3d", "-w", "64", "--parallel", "tp=2,ep=16"])
    assert res.exit_code != 0 and "expected a divisor of the workload's num_experts = 8, got ep=16" in res.output
