"""Cluster job traces -> the job population, every row accounted for.

``read_population(paths, fmt=None, mapping=None, ...) -> (population, report)`` reads the
Alibaba PAI 2020 trace (``pai-v2020``), Gavel traces (``gavel``), Pollux's Philly job list
(``philly-pollux``), Alibaba's 2023 GPU-sharing pods (``openb-v2023``) or any CSV/Parquet job
table through a column mapping (``csv``). The population has one row per job
(:data:`POPULATION_SCHEMA`): model (zoo name), architecture and counts, GPU, duration and GPU
time, and whether the job is attributed or why not. Workloads are attached later by model name.
See docs/ingest.md.
"""

from ddlscope.ingest.api import FORMATS, detect_format, read_population
from ddlscope.ingest.generic import BUILTIN_FORMATS, FIELDS, TableMapping, load_mapping, parse_map_pairs
from ddlscope.ingest.models import ZOO_MODELS, ModelMap, builtin_model_map, load_model_map, parse_model_mix
from ddlscope.ingest.pai import read_pai_v2020
from ddlscope.ingest.population import FEATURE_COLUMNS, POPULATION_SCHEMA, IngestOptions
from ddlscope.ingest.report import IngestReport, NoAttributableJobsError

__all__ = [
    "BUILTIN_FORMATS",
    "FEATURE_COLUMNS",
    "FIELDS",
    "FORMATS",
    "POPULATION_SCHEMA",
    "ZOO_MODELS",
    "IngestOptions",
    "IngestReport",
    "ModelMap",
    "NoAttributableJobsError",
    "TableMapping",
    "builtin_model_map",
    "detect_format",
    "load_mapping",
    "load_model_map",
    "parse_map_pairs",
    "parse_model_mix",
    "read_pai_v2020",
    "read_population",
]
