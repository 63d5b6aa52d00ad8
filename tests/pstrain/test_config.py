"""Run configuration checks that need no process: the sync deadlock bound on server threads, failure
injection, the input path."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ddlscope.pstrain.config import FailureInjection, RunConfig, min_server_threads


def test_min_server_threads_follows_the_sync_bound():
    # (N - 1) x min(tables + 1, K) + 1; word model 2 tables, ctr 1
    assert min_server_threads("sync", "word", 2, "persistent", None) == 1 * 3 + 1 == 4
    assert min_server_threads("sync", "ctr", 3, "per-rpc", None) == 2 * 2 + 1 == 5
    # a pool of persistent connections limits connections, not the RPCs multiplexed on them
    assert min_server_threads("sync", "word", 5, "persistent", 1) == 4 * 3 + 1 == 13
    # per-RPC connections with --max-connections K: at most K RPCs in flight per worker
    assert min_server_threads("sync", "word", 3, "per-rpc", 2) == 2 * 2 + 1 == 5
    assert min_server_threads("sync", "word", 1, "persistent", None) == 1
    assert min_server_threads("async", "word", 20, "persistent", None) == 1
    # the default leaves room for every RPC in flight: N x (tables + 1) + 4
    assert RunConfig(workers=3).effective_server_threads == 3 * 3 + 4 == 13


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_too_few_server_threads_are_refused(threads):
    with pytest.raises(ValidationError) as info:
        RunConfig(server_threads=threads)
    assert (f"--server-threads {threads}: a sync run of 2 workers needs at least 4 handler threads per server or it "
            "can deadlock (1 of the 2 workers can each have 3 requests waiting") in str(info.value)
    assert RunConfig(server_threads=4).server_threads == 4
    assert RunConfig(server_threads=threads, mode="async").server_threads == threads


def test_failure_injection_messages():
    assert str(FailureInjection.parse("server:0:100:stop")) == "server:0:100:stop"
    for text, expected in [
        ("worker:0:-1", "--inject-failure 'worker:0:-1': ITERATION must be 0 or more, got -1"),
        ("server:x:3", "--inject-failure 'server:x:3': ID must be a whole number, got 'x'"),
        ("worker:1", "--inject-failure 'worker:1': expected worker:ID:ITERATION or server:ID:RPCS"),
        ("worker:1:2:hup", "expected worker:ID:ITERATION or server:ID:RPCS, optionally followed by :stop"),
    ]:
        with pytest.raises(ValueError) as info:
            FailureInjection.parse(text)
        assert expected in str(info.value)
    with pytest.raises(ValidationError, match=r"--inject-failure worker:9:5: there is no worker 9 \(--workers 2: "
                                              r"ids 0 to 1\)"):
        RunConfig(inject_failure=FailureInjection.parse("worker:9:5"))
    with pytest.raises(ValidationError, match=r"worker 0 never starts iteration 10 \(--iterations 10"):
        RunConfig(iterations=10, inject_failure=FailureInjection.parse("worker:0:10"))


def test_data_path_names_folders_and_where_the_default_is_looked_for(tmp_path, monkeypatch):
    with pytest.raises(IsADirectoryError, match=f"--data {tmp_path}: is a folder; expected a file"):
        RunConfig(data=tmp_path).data_path()
    monkeypatch.setenv("DDLSCOPE_SHARED_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        RunConfig(model="ctr").data_path()
    assert str(info.value) == (
        f"no --data given and the default data file criteo/criteo_sample.txt was not found (looked in {tmp_path}; "
        "the default is searched in $DDLSCOPE_SHARED_DATA, else the nearest shared/data folder above the working "
        "directory or above the installed ddlscope package); pass --data FILE or set DDLSCOPE_SHARED_DATA")
