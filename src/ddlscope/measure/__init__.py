"""Measured step breakdown from PyTorch profiler (Kineto) traces: ``ddlscope trace``.

Parse once into tables, then independent analyzers (the Holistic Trace Analysis way):

- :mod:`~ddlscope.measure.reader`: JSON / gzip / tar / folders -> one events table per rank;
- :mod:`~ddlscope.measure.rules`: kernel-name classification rules as data (package file
  ``data/trace_rules.toml``, extended with ``--rules``);
- :mod:`~ddlscope.measure.tables`: GPU activities, CPU operators, runtime calls, launch links;
- :mod:`~ddlscope.measure.iterations`: iterations (ProfilerStep or inferred) and their windows;
- :mod:`~ddlscope.measure.timeline`: the exclusive temporal breakdown, exposed/overlapped
  communication, idle time by visible cause;
- :mod:`~ddlscope.measure.comm`: collectives, message sizes, algorithm and bus bandwidth;
- :mod:`~ddlscope.measure.flops`: FLOPs from recorded op shapes;
- :mod:`~ddlscope.measure.skew`: per-rank step times and the straggler;
- :mod:`~ddlscope.measure.baseline`: what-if from the measured baseline and the model check,
  through the step-time model of :mod:`ddlscope.model`;
- :mod:`~ddlscope.measure.analysis`: :func:`~ddlscope.measure.analysis.analyze_traces` runs it all;
- :mod:`~ddlscope.measure.fuzz`: fuzz targets of the trace and ``--rules`` CSV readers.
"""
