"""Parameter-update skew and the in-network (programmable switch) offload what-if.

The data flow, one module per arrow::

    key/update streams ──streams──► KeyStream (events: key, op, iteration, worker, count)
        ──frequency / fit / locality──► frequency model (rank-frequency, Zipf fit, coverage,
                                         reuse distance, hot-set churn)
        ──offload──► switch what-if (hits per policy and memory budget, bytes and server work
                     saved, latency gain from the RPC stage breakdown)

Sources: RPC logs with a ``keys`` column (:mod:`ddlscope.rpc.schema`), per-key update-count
tables written by the instrumented parameter-server training, a categorical column of a CTR
dataset, or the word tokens of a text.

A key column larger than memory: ``streaming`` (the frequency model, ``rpc skew --streaming``) and
``offload_streaming`` (the switch what-if, ``rpc offload --streaming``) read it in batches and give
the in-memory results exactly (docs/streaming.md).
"""
