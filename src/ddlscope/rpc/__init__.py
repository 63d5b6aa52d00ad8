"""Parameter-server RPC latency: the log schema, readers, and the dissection into stages."""
