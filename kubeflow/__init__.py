"""Compile, submit and schedule the pipeline on Kubeflow Pipelines."""
