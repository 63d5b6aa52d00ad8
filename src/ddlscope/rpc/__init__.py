"""Parameter-server RPC latency: the log schema, readers, and the dissection into stages.

The Python API (documented in docs/rpc.md)::

    from ddlscope.rpc import read_rpc_log, decompose, dissect, stage_percentiles, stage_summary

    log = read_rpc_log(["worker0.csv", "worker1.csv"])   # RpcLog: .frame, .rejected, .notes
    rpcs = decompose(log.frame)                          # + <stage>_ns, latency_ns
    stage_summary(rpcs, by="op")                         # mean stage times and shares per op
    d = dissect(log)                                     # Dissection: every analyzer's tables
"""

from ddlscope.rpc.concurrency import add_concurrency, concurrency_fit, in_flight_at_start
from ddlscope.rpc.decompose import decompose, stage_percentiles, stage_summary
from ddlscope.rpc.dissect import Dissection, annotate, dissect
from ddlscope.rpc.readers import RpcLog, read_rpc_log
from ddlscope.rpc.validate import ColumnMapping, check_rows

__all__ = [
    "ColumnMapping", "Dissection", "RpcLog", "add_concurrency", "annotate", "check_rows", "concurrency_fit",
    "decompose", "dissect", "in_flight_at_start", "read_rpc_log", "stage_percentiles", "stage_summary",
]
