"""Helpers for testing ddlscope's readers (the way ``numpy.testing`` serves NumPy): file mutations
used by the fuzz tests in ``tests/`` and by ``benchmarks/fuzz_readers.py``."""
