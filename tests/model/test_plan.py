"""The plan search: the valid plan space counted by hand, ranking, the reasons, the CLI."""

import json

import polars as pl
import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.model.plan import PlanSpace, placements, search
from ddlscope.profile.llm import DecoderConfig
from ddlscope.specs.catalog import builtin_catalog

CFG = DecoderConfig(name="tiny", layers=4, hidden=512, heads=8, vocab=1000, seq_len=256)


def test_plan_space_by_hand():
    space = PlanSpace(micro_batches=(1, 2), virtual_stages=(1, 2), context_parallel=(1,))
    place = placements(CFG, 16, 8, 32, space)
    # fsdp: b = 1 (M = 2) and b = 2 (M = 1), each with the 4 shardings (hybrid: 2 servers)
    assert place.filter(pl.col("architecture") == "fsdp").height == 8
    # 3d: (tp, pp) with tp | 8 and heads, pp | 4 layers, tp pp | 16, tp pp >= 2: 10 pairs x 2 micro-batches,
    # plus v = 2 where pp = 2 (4 layers / 2 stages divisible by 2, M a multiple of 2): 4 pairs x 2
    three = place.filter(pl.col("architecture") == "3d")
    assert three.height == 20 + 8
    assert three.filter(pl.col("virtual_stages") == 2)["pp"].unique().to_list() == [2]
    # the micro-batches fill the global batch: b M dp = 32
    dp = 16 // (three["tp"] * three["pp"])
    assert (three["micro_batch"] * three["microbatches"] * dp == 32).all()
    # cp = 2: (tp, pp) with 2 tp pp | 16, i.e. tp pp | 8: 9 pairs ((1, 1) now counts: 2 GPUs of model
    # parallelism); x 2 micro-batches, plus v = 2 where pp = 2 (tp 1, 2, 4; M even): 3 pairs x 2
    space_cp = PlanSpace(micro_batches=(1, 2), virtual_stages=(1, 2), context_parallel=(2,))
    three_cp = placements(CFG, 16, 8, 32, space_cp).filter(pl.col("architecture") == "3d")
    assert (three_cp["cp"] == 2).all() and three_cp.height == 2 * 9 + 2 * 3
    with pytest.raises(ValueError, match="whole servers of 8 GPUs, got 12"):
        placements(CFG, 12, 8, 32)


def test_search_ranks_and_explains():
    system = builtin_catalog().system("dgx-a100")
    ranked, t = search(CFG, 16, system, 32, space=PlanSpace(micro_batches=(1, 2), context_parallel=(1,)))
    # the 36 placements of test_plan_space_by_hand (v = 4 would need 4 layers per stage: none) x 3 recomputations
    assert t["plans"] == ranked.height == (8 + 28) * 3
    assert ranked["loses_by"][0] == "(best)"
    fits = ranked.filter(pl.col("fits_gpu_memory").fill_null(True))
    assert fits["tokens_per_s"].is_sorted(descending=True)
    others = ranked["loses_by"][1:].to_list()
    assert all(r.startswith("does not fit the GPU memory (") or " +" in r or r == "ties the best (< 0.05 %)"
               for r in others)
    # step_s is the optimizer step on every row (an fsdp row's micro-batches included): tokens/s x
    # step_s = the global batch's tokens, 32 x 256
    assert (ranked["tokens_per_s"] * ranked["step_s"]).to_list() == pytest.approx([32 * 256] * ranked.height)
    # tokens/s = samples/s x sequence length; fsdp samples per step = b x GPUs
    first = ranked.row(0, named=True)
    assert first["tokens_per_s"] == pytest.approx(first["samples_per_s"] * 256)


def test_cli_plan(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
                               "num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 2,
                               "vocab_size": 1000, "hidden_act": "silu", "max_position_embeddings": 256}))
    res = CliRunner().invoke(app, ["plan", str(cfg), "--gpus", "16", "--global-batch", "32", "--seq-len", "256",
                                   "--format", "json", "--top", "3"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert len(out["rows"]) == 3 and out["rows"][0]["loses_by"] == "(best)" and out["plans"] > 3
    bad = CliRunner().invoke(app, ["plan", "gpt-9"])
    assert bad.exit_code == 2 and "expected a Hugging Face config.json path or mpt-<size>" in bad.output


def test_cli_predict_parallel_settings():
    runner = CliRunner()
    res = runner.invoke(app, ["predict", "-a", "fsdp", "-w", "16", "-s", "dgx-a100", "--parallel",
                              "sharding=SHARD_GRAD_OP", "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    row = rows[0] if isinstance(rows, list) else rows["rows"][0]
    assert row["architecture"] == "fsdp" and row["sharding"] == "zero2" and row["num_servers"] == 2
    res = runner.invoke(app, ["predict", "-a", "3d", "-w", "32", "-s", "dgx-a100", "--parallel", "tp=4,pp=3"])
    assert res.exit_code == 2 and "tp x pp = 12 to divide the 32 GPUs" in res.output
    res = runner.invoke(app, ["predict", "-a", "fsdp", "-w", "16", "--parallel", "stages=2"])
    assert res.exit_code == 2 and "expected key=value with a key of sharding, tp" in res.output


def test_cli_plan_prices_the_flash_attention_release(tmp_path):
    # the same plans, the attention kernel at the Ampere attention_v1_eff (0.325) instead of attention_eff
    # (0.615): every plan slower; a release other than 1 or 2 is refused
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
                               "num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 2,
                               "vocab_size": 1000, "hidden_act": "silu", "max_position_embeddings": 2048}))
    args = ["plan", str(cfg), "--gpus", "8", "--global-batch", "16", "--seq-len", "2048", "--format", "json",
            "--top", "500"]
    keys = ("architecture", "sharding", "tp", "cp", "pp", "virtual_stages", "micro_batch", "recompute")
    runs = {}
    for version in ("2", "1"):
        res = CliRunner().invoke(app, [*args, "--flash-attention-version", version])
        assert res.exit_code == 0, res.output
        runs[version] = {tuple(r[k] for k in keys): r["step_s"] for r in json.loads(res.output)["rows"]}
    assert runs["1"].keys() == runs["2"].keys()
    assert all(runs["1"][k] > runs["2"][k] for k in runs["2"])
    bad = CliRunner().invoke(app, [*args, "--flash-attention-version", "3"])
    assert bad.exit_code == 2 and "--flash-attention-version" in bad.output


def test_cli_plan_when_no_plan_fits_calls_none_best_and_says_why(tmp_path):
    # 64 layers of h 8192 (64 heads, 8 KV heads of 128), MLP 22016, vocab 1000, untied embeddings:
    # 64 x (2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 22016 + 2 x 8192) + 2 x 1000 x 8192 + 8192 parameters
    psi = 64 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 22016 + 2 * 8192) + 2 * 1000 * 8192 + 8192
    assert psi == 44_309_291_008
    # the least any plan on 8 GPUs can hold: the Adam state (2 + 12 + 4 bytes per parameter) over 8 GPUs,
    # 92.85 GiB, more than the A100's 80 GiB: nothing fits
    floor_gib = 18 * psi / 8 / 2**30
    cfg = tmp_path / "big.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 8192, "intermediate_size": 22016,
                               "num_attention_heads": 64, "num_hidden_layers": 64, "num_key_value_heads": 8,
                               "vocab_size": 1000, "hidden_act": "silu", "max_position_embeddings": 256}))
    args = ["plan", str(cfg), "--gpus", "8", "--global-batch", "8", "--seq-len", "256", "-s", "dgx-a100",
            "--top", "3"]
    res = CliRunner().invoke(app, [*args, "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["plans_fitting_gpu_memory"] == 0 and len(out["rows"]) == 3
    assert all(not r["fits_gpu_memory"] and r["loses_by"].startswith("does not fit the GPU memory (")
               and r["loses_by"].endswith(" GiB > 80.0 GiB)") for r in out["rows"])
    why = out["no_plan_fits_gpu_memory"]
    need = float(why.split("needs ")[1].split(" GiB")[0])
    assert floor_gib <= need <= floor_gib + 0.5  # the state plus full recomputation's few activations
    assert why == (f"the plan needing the least memory needs {need:.1f} GiB per GPU (3d tp 8, cp 1, pp 1, ep 1, "
                   "micro-batch 1 x 8 micro-batches, recompute full), the A100-SXM4-80GB has 80.0 GiB; more GPUs "
                   "or a GPU with more memory would be needed")
    assert f"warning: no plan fits the GPU memory: {why}" in res.stderr.replace("\n", "")
    table = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert table.exit_code == 0, table.output
    text = table.output
    assert "(best)" not in text and "best plans" not in text
    assert text.startswith(f"no plan fits the GPU memory: {cfg.stem} (44.3 B parameters), 8 x A100-SXM4-80GB on "
                           "dgx-a100, global batch 8 x 256 tokens; the plans ranked by tokens/s as if they fit\n")
    assert f"no_plan_fits_gpu_memory: {why}" in text.replace("\n", "")


def test_cli_plan_refuses_what_it_cannot_plan_before_searching():
    runner = CliRunner()
    one = runner.invoke(app, ["plan", "mpt-125m", "--gpus", "1"])
    assert one.exit_code != 0 and "spread a model over 2 GPUs or more, got 1" in one.output
    top = runner.invoke(app, ["plan", "mpt-125m", "--top", "0"])
    assert top.exit_code == 2 and "--top" in top.output
    fmt = runner.invoke(app, ["plan", "mpt-125m", "-f", "xml"])
    assert fmt.exit_code != 0 and "--format: expected table, json or csv, got 'xml'" in fmt.output
