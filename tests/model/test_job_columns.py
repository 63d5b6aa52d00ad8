"""The column groups of the Jobs table are the columns their fillers write."""

from __future__ import annotations

from ddlscope.model.jobs import JOB_SCHEMA, SYSTEM_COLUMNS, WORKLOAD_COLUMNS, system_columns, workload_columns
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.examples import EXAMPLE_SERVER, example_workload


def test_workload_columns_are_what_workload_columns_fills():
    assert tuple(workload_columns(example_workload())) == WORKLOAD_COLUMNS
    assert WORKLOAD_COLUMNS[0] == "workload" and WORKLOAD_COLUMNS[-1] == "peak_memory_bytes"
    assert set(WORKLOAD_COLUMNS) <= set(JOB_SCHEMA)


def test_system_columns_are_what_system_columns_fills():
    assert tuple(system_columns(builtin_catalog().system(EXAMPLE_SERVER))) == SYSTEM_COLUMNS
    assert not set(SYSTEM_COLUMNS) & set(WORKLOAD_COLUMNS)
