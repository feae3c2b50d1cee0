"""One-off experiments: scripts run to settle a tuning question (see the section
"One-off experiments" of ``benchmarks/README.md`` and ``doc/guide/tuning.rst``)."""
