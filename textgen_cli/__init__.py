"""`textgen`, the command-line interface: the parser (`cli.py`), the commands (`commands.py`) and
the terminal logging (`logs.py`).

The top of the import graph: it imports `pipeline/` (the pipeline definition, its configuration
and the local runner) and `kubeflow/` (compile, submit, schedule), and neither of those imports it
(tests/test_architecture.py).
"""
