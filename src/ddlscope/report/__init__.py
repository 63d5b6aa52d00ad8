"""Output for people: console tables, JSON/CSV, figures and self-contained HTML reports.

Every command of ddlscope prints and writes through this package, so all outputs look alike:
:mod:`~ddlscope.report.console` for terminal tables and ``--format table|json|csv``,
:mod:`~ddlscope.report.figures` for the shared matplotlib style, and
:mod:`~ddlscope.report.html` for report folders (``index.html`` + figures as PNG/SVG + tables as
CSV/Parquet + ``summary.json``).
"""
