"""Packaging for textgen-tfx.

Beam workers and the Kubeflow container image install the project with this file
(`--setup_file`), so it lists only what the pipeline code imports at run time. The full,
pinned environment lives in `requirements.lock` (see `make lock`).

The files the components read at run time (data/ and schema/: safety and bias suites, lexicons,
curated schemas, sample prompts, the sample corpus and the instruction data) are copied into the
package as `components/_resources/`, so an installed wheel finds them from any directory
(`components/resources.py`).
"""

import os
import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

RESOURCE_FOLDERS = ("data", "schema")
# Repository-only files under those folders that the installed package does not need.
RESOURCE_EXCLUDES = (
    "make_sample_corpus.py",
    "make_instruction_data.py",
    "make_placebos.py",
    "make_tiny_checkpoint.py",
    "__pycache__",
)


class BuildPyWithResources(build_py):
    """build_py that also copies data/ and schema/ into components/_resources/."""

    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        for folder in RESOURCE_FOLDERS:
            target = os.path.join(self.build_lib, "components", "_resources", folder)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(os.path.join(here, folder), target, ignore=shutil.ignore_patterns(*RESOURCE_EXCLUDES))


setup(
    name="textgen-tfx",
    version="0.1.0",
    description="A TFX pipeline that takes a raw text corpus to a served, governed text-generation model.",
    license="Apache-2.0",
    python_requires=">=3.10,<3.11",
    packages=find_packages(
        include=[
            "pipeline",
            "pipeline.*",
            "components",
            "components.*",
            "kubeflow",
            "kubeflow.*",
            "textgen_cli",
            "textgen_cli.*",
        ]
    ),
    package_data={"": ["*.pbtxt", "*.yaml", "*.json"]},
    cmdclass={"build_py": BuildPyWithResources},
    install_requires=[
        "tfx==1.16.0",
        "tensorflow==2.16.2",
        "tensorflow-text==2.16.1",
        "tf-keras==2.16.0",
        "apache-beam[gcp,aws]==2.59.0",
        "tensorflow-io==0.37.1",
        "tensorflow-data-validation==1.16.1",
        "tensorflow-transform==1.16.0",
        "kfp==2.5.0",
        "kfp-pipeline-spec==0.2.2",
        "pydantic>=2,<3",
        "pyyaml>=6",
        "mlflow>=2.16,<3",
        "better-profanity>=0.7",
        "matplotlib>=3.8",
        "scipy>=1.10",
        "kubernetes>=26",
        "tensorflow-serving-api==2.16.1",
        "vaderSentiment>=3.3",
        "py3langid>=0.2.2",
        "alt-profanity-check==1.5.1",
        "safetensors>=0.4",  # the Trainer reads Hugging Face checkpoints with its numpy API
        "markdown>=3.5",  # model cards: Markdown rendered to HTML
        "sentencepiece>=0.2",  # learning tokenizers and reading checkpoint tokenizer.model files
        "tokenizers>=0.20",  # the Tokenizer stage checks a checkpoint's tokenizer.json graph against it
    ],
    entry_points={"console_scripts": ["textgen=textgen_cli.cli:console"]},
)
