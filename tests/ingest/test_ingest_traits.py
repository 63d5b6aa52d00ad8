"""Ingest reads the traits table: fsdp and 3d rows of a user's table are checked like the six PAI kinds."""

from ddlscope.ingest import parse_map_pairs, read_population

M = ["job_id=id", "model=net", "num_gpus=gpus", "duration_s=secs"]


def test_given_fsdp_rows_are_checked_by_their_traits(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text(
        "id,net,gpus,secs,arch,srv\n"
        "j1,gpt2,16,100,fsdp,\n"       # line 2: ok, 2 servers x 8
        "j2,gpt2,1,100,fsdp,\n"        # line 3: one GPU
        "j3,gpt2,12,100,fsdp,5\n"      # line 4: 12 GPUs do not divide over 5 servers
        "j4,gpt2,32,100,3d,4\n"        # line 5: ok
        "j5,gpt2,16,100,FSDP,2\n"      # line 6: ok (any case)
        "j6,gpt2,8,100,megatron,\n"    # line 7: unknown
    )
    pop, report = read_population(path, mapping=parse_map_pairs([*M, "architecture=arch", "num_servers=srv"]))
    assert pop["job_id"].to_list() == ["j1", "j4", "j5"]
    assert pop["architecture"].cast(str).to_list() == ["fsdp", "3d", "fsdp"]
    got = {r["line"]: (r["problem"], r["detail"]) for r in report.malformed.iter_rows(named=True)}
    assert got[3] == ("architecture does not fit counts", "fsdp with 1 GPU(s); expected >= 2 GPUs")
    assert got[4] == ("architecture does not fit counts",
                      "fsdp with 12 GPUs on 5 servers; expected the GPUs to divide evenly over the servers")
    assert got[7][0] == "unknown architecture" and "megatron" in got[7][1] and "fsdp, 3d" in got[7][1]
