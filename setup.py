"""Packaging for textgen-tfx.

Beam workers and the Kubeflow container image install the project with this file
(`--setup_file`), so it lists only what the pipeline code imports at run time. The full,
pinned environment lives in `requirements.lock` (see `make lock`).
"""
from setuptools import find_packages, setup

setup(
    name="textgen-tfx",
    version="0.1.0",
    description="A TFX pipeline that takes a raw text corpus to a served, governed text-generation model.",
    license="Apache-2.0",
    python_requires=">=3.10,<3.11",
    packages=find_packages(include=["pipeline", "pipeline.*", "components", "components.*", "kubeflow", "kubeflow.*"]),
    package_data={"": ["*.pbtxt", "*.yaml"]},
    install_requires=[
        "tfx==1.16.0",
        "tensorflow==2.16.2",
        "tensorflow-text==2.16.1",
        "tf-keras==2.16.0",
        "apache-beam[gcp]==2.59.0",
        "tensorflow-data-validation==1.16.1",
        "tensorflow-transform==1.16.0",
        "kfp==2.5.0",
        "kfp-pipeline-spec==0.2.2",
        "pydantic>=2,<3",
        "pyyaml>=6",
        "py3langid>=0.2.2",
        "alt-profanity-check==1.5.1",
    ],
    entry_points={"console_scripts": ["textgen=pipeline.cli:main"]},
)
