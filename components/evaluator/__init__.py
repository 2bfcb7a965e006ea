"""Evaluator: every gate on a candidate model and the ModelBlessing they decide.

At the top: `component.py` (the TFX component), `options.py` (its configuration), `evaluation.py`
(runs each gate family and composes their results), `gates.py` (a gate's and a family's result),
`report.py` and `blessing_files.py` (what the stage writes: report.html, and the file names other
stages read) and `scorers.py` (the toxicity scorers, named by dotted path in
`evaluator.safety.scorer`, so their module path is configuration). `metrics/` measures without
prompting the model; `probes/` prompts it and judges what it generates.
"""
