"""An instrumented parameter-server training that produces real RPC latency logs.

``ddlscope ps-train`` runs N worker and M server processes of a sparse model (embedding tables +
an MLP) that talk gRPC on this machine, and logs every RPC on both sides in the schema of
:mod:`ddlscope.rpc.schema`. Modules, in data-flow order: :mod:`~ddlscope.pstrain.data` (text and
CTR readers), :mod:`~ddlscope.pstrain.models` (parameters, sharding, batches),
:mod:`~ddlscope.pstrain.wire` (payload framing), :mod:`~ddlscope.pstrain.server` and
:mod:`~ddlscope.pstrain.client`/:mod:`~ddlscope.pstrain.worker` (the two sides),
:mod:`~ddlscope.pstrain.netem` (emulated hosts), :mod:`~ddlscope.pstrain.launcher` (process
management), :mod:`~ddlscope.pstrain.logs` and :mod:`~ddlscope.pstrain.otlp` (outputs).
"""
