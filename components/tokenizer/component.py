"""The Tokenizer component: the tokenizer a run tokenizes with, as an artifact.

Input: the Examples (train split). Output: a `Tokenizer` artifact (artifact.py says what it
holds).

Which model is used follows `tokenizer.policy` (policy.py). The production model for `reuse` and
`auto` is looked up in the model registry by the executor, at run time.
"""

import json
import logging
import os
from typing import Any, Dict, List

import tensorflow as tf
from tfx import types
from tfx.dsl.components.base import base_beam_component, base_beam_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.example_gen import ingest_report
from components.example_gen.data_kind import CONVERSATIONS, examples_data_kind
from components.registry.options import RegistryOptions
from components.tokenizer import (
    agreement,
    chat_setup,
    chat_template,
    hf_files,
    ids,
    learn,
    loaded,
    model_file,
    numbers,
    policy,
    sample,
)
from components.tokenizer.artifact import Tokenizer
from components.tokenizer.graph import GraphTokenizer
from components.tokenizer.options import TokenizerOptions, automatic_vocab_limit

log = logging.getLogger(__name__)
TRAIN_SPLIT = "train"
SAMPLE_FILE = "sample.tfrecord.gz"
SPAN = "span"
PROBE_SAMPLE_SIZE = 256  # sample chunks a checkpoint's tokenizer.json graph is checked on (agreement.py)


class TokenizerSpec(ComponentSpec):
    PARAMETERS = {
        "options": ExecutionParameter(type=str),  # TokenizerOptions as JSON
        "text_feature": ExecutionParameter(type=str),
        # Where the production model is looked up (policy reuse/auto): RegistryOptions as JSON, the
        # registered model's serving name, and the embedded store's directory (empty on a cluster).
        "registry": ExecutionParameter(type=str),
        "model_name": ExecutionParameter(type=str),
        "registry_dir": ExecutionParameter(type=str, optional=True),
        "checkpoint": ExecutionParameter(type=str, optional=True),  # model.checkpoint ('' when unset)
    }
    INPUTS = {"examples": ChannelParameter(type=standard_artifacts.Examples)}
    OUTPUTS = {"tokenizer": ChannelParameter(type=Tokenizer)}


def _find_production(exec_properties: Dict[str, Any]):
    from components.registry.model_registry import find_production_model

    return find_production_model(
        RegistryOptions.from_parameter(exec_properties["registry"]),
        exec_properties["model_name"],
        exec_properties.get("registry_dir") or None,
    )


class TokenizerExecutor(base_beam_executor.BaseBeamExecutor):
    """Learns, reuses or loads the pinned model and writes the Tokenizer artifact."""

    def Do(
        self,
        input_dict: Dict[str, List[types.Artifact]],
        output_dict: Dict[str, List[types.Artifact]],
        exec_properties: Dict[str, Any],
    ) -> None:
        options = TokenizerOptions.from_parameter(exec_properties["options"])
        output = artifact_utils.get_single_instance(output_dict["tokenizer"])
        checkpoint = exec_properties.get("checkpoint") or ""
        choice = policy.choose(
            options.policy, options.pinned_model_file, lambda: _find_production(exec_properties), checkpoint
        )
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        conversations = examples_data_kind(examples) == CONVERSATIONS
        if choice.directory:  # a checkpoint's tokenizer: the checkpoint's own, or the production model's copy
            self._copy_checkpoint_tokenizer(
                choice, checkpoint, output, conversations, examples, options, exec_properties["text_feature"]
            )
            return
        text_feature = exec_properties["text_feature"]
        if choice.action == policy.LEARN:
            drawn = self._draw_sample(examples, text_feature, options.sample_size, options.chunk_chars)
            proto = self._learn(drawn, examples, options, output)
            described = model_file.describe(proto, f"the model learned from {examples.uri}")
            source = "learned"
        else:
            drawn = self._draw_sample(examples, text_feature, PROBE_SAMPLE_SIZE, options.chunk_chars)
            described = model_file.read_model(choice.model_path)
            source = "reused" if choice.action == policy.REUSE else "pinned"
            output.set_string_custom_property("model_path", choice.model_path)
        if conversations:  # the default chat template's tokens join the vocabulary (chat_setup.py)
            proto, chat = chat_setup.learned_chat(described.proto, ids.EOS_ID)
            described = model_file.describe(proto, "the learned model with the chat template's tokens")
            self._write_chat(chat, output)
        model_file.copy_model(described.proto, model_file.artifact_model_path(output.uri))
        _record_number_splitting(GraphTokenizer(described.proto), drawn.chunks, output, source)
        output.set_int_custom_property("vocab_size", described.vocab_size)
        output.set_string_custom_property("algorithm", described.algorithm)
        output.set_string_custom_property("sha256", described.sha256)
        output.set_string_custom_property("source", source)
        output.set_string_custom_property("source_detail", choice.reason)
        log.info(
            "Tokenizer %s (%s): %d pieces, %s, sha256 %s",
            source,
            choice.reason,
            described.vocab_size,
            described.algorithm,
            described.sha256,
        )

    @staticmethod
    def _write_chat(chat, output: types.Artifact) -> None:
        """Writes the chat template and its grammar beside the tokenizer's files and records them."""
        for name, data in chat.files().items():
            with tf.io.gfile.GFile(os.path.join(output.uri, name), "wb") as handle:
                handle.write(data)
        output.set_string_custom_property("chat_template_sha256", chat.template_sha256)
        output.set_string_custom_property("chat_stop_token_ids", json.dumps(list(chat.stop_token_ids)))
        log.info(
            "Chat template (sha256 %s): turns end with %s; decoding stops at ids %s",
            chat.template_sha256,
            chat.grammar.end_of_turn_tokens(),
            list(chat.stop_token_ids),
        )

    def _copy_checkpoint_tokenizer(
        self,
        choice: policy.Choice,
        checkpoint: str,
        output: types.Artifact,
        conversations: bool,
        examples: types.Artifact,
        options: TokenizerOptions,
        text_feature: str,
    ) -> None:
        """Checks a checkpoint's tokenizer files (the checkpoint's own, or those a production model
        fine-tuned from it carries; for a tokenizer.json, the graph's ids against `tokenizers` on a
        probe set) and writes them, with their special ids, as the artifact; for conversation data
        also its chat template, which it must have. With `checkpoint` (model.checkpoint), the
        checkpoint itself is checked first, from its config and weight headers, against this
        tokenizer (trainer/checkpoint/preflight.py): a bad checkpoint stops the run here, before
        Transform and the Trainer."""
        from components.trainer.checkpoint import preflight

        tokenizer = loaded.load(choice.model_path)
        if not conversations:  # a production copy's chat record belongs to conversation runs only
            chat_files = (chat_template.TEMPLATE_FILE, chat_template.GRAMMAR_FILE)
            tokenizer = tokenizer._replace(
                files={name: data for name, data in tokenizer.files.items() if name not in chat_files}
            )
        if checkpoint:
            checked = preflight.check_checkpoint(checkpoint, tokenizer=tokenizer)
            log.info(
                "Checkpoint %s: %s, %d weight tensors as config.json describes, embedding of %d rows for the "
                "tokenizer's %d tokens",
                checkpoint,
                checked.config.model_type,
                checked.tensors,
                checked.config.vocab_size,
                tokenizer.vocab_size,
            )
        drawn = self._draw_sample(examples, text_feature, PROBE_SAMPLE_SIZE, options.chunk_chars)
        graph = tokenizer.graph()
        if hf_files.TOKENIZER_JSON in tokenizer.files:
            checked = agreement.check(
                graph,
                tokenizer.files[hf_files.TOKENIZER_JSON],
                drawn.chunks,
                os.path.join(choice.model_path, hf_files.TOKENIZER_JSON),
            )
            output.set_string_custom_property("tokenizers_agreement", checked.to_json())
            log.info(
                "Tokenizer: the graph's ids equal tokenizers %s on %d sample and %d fixed texts",
                checked.tokenizers_version,
                checked.sample_texts,
                checked.fixed_texts,
            )
        else:
            output.set_string_custom_property(
                "tokenizers_agreement",
                json.dumps(
                    {"equal": None, "skipped": f"no {hf_files.TOKENIZER_JSON} (tokenized as transformers converts it)"}
                ),
            )
        tokenizer.write(output.uri)
        _record_number_splitting(graph, drawn.chunks, output, "checkpoint" if checkpoint else "reused")
        if conversations:  # the template a production copy carries, else the checkpoint's own
            template_dir = checkpoint or choice.model_path
            chat = tokenizer.chat() or chat_setup.checkpoint_chat_of(tokenizer, template_dir)
            if chat is None:
                raise chat_template.ChatTemplateError(
                    f"the examples are conversations, and the checkpoint {template_dir} has no chat template "
                    f"({chat_template.TEMPLATE_FILE}, or chat_template in tokenizer_config.json): add the template "
                    "the model was trained with, or train on plain text"
                )
            self._write_chat(chat, output)
        output.set_int_custom_property("vocab_size", tokenizer.vocab_size)
        output.set_string_custom_property("algorithm", tokenizer.kind)
        output.set_string_custom_property("sha256", tokenizer.sha256)
        output.set_string_custom_property(
            "file_sha256", json.dumps(hf_files.files_sha256(tokenizer.files), sort_keys=True)
        )
        output.set_string_custom_property("unused_files", json.dumps(list(tokenizer.unused_files)))
        output.set_string_custom_property("special_tokens", json.dumps(tokenizer.special.to_json(), sort_keys=True))
        output.set_string_custom_property("model_path", choice.model_path)
        source = "checkpoint" if choice.action == policy.CHECKPOINT else "reused"
        output.set_string_custom_property("source", source)
        output.set_string_custom_property("source_detail", choice.reason)
        log.info(
            "Tokenizer (%s) from %s: %s, %d tokens, special ids %s, sha256 %s%s",
            source,
            choice.model_path,
            tokenizer.kind,
            tokenizer.vocab_size,
            tokenizer.special,
            tokenizer.sha256,
            f" (not used: {', '.join(tokenizer.unused_files)})" if tokenizer.unused_files else "",
        )

    def _draw_sample(
        self, examples: types.Artifact, text_feature: str, sample_size: int, chunk_chars: int
    ) -> sample.Sample:
        """`sample_size` chunks of the train split, drawn with Beam (sample.py)."""
        return sample.draw_sample(
            self._make_beam_pipeline(),
            [_train_pattern(examples)],
            text_feature,
            sample_size,
            chunk_chars,
            os.path.join(self._get_tmp_dir(), SAMPLE_FILE),
        )

    @staticmethod
    def _learn(
        drawn: sample.Sample, examples: types.Artifact, options: TokenizerOptions, output: types.Artifact
    ) -> bytes:
        """Learns the model from the drawn sample and records what it was learned from."""
        limit = options.vocab_size or automatic_vocab_limit(drawn.num_bytes)
        try:
            rules = learn.PieceRules(options.pieces_cross_words, options.split_digits)
            if options.vocab_size is None:
                learned = learn.learn_largest_model(drawn.chunks, limit, options.algorithm, rules)
            else:
                learned = learn.learn(drawn.chunks, options.vocab_size, options.algorithm, rules)
        except learn.TokenizerLearningError as exc:
            raise learn.TokenizerLearningError(f"{exc}{_survivors(examples)}") from None
        if options.vocab_size is None:
            log.info(
                "Tokenizer: automatic vocabulary of %d pieces (the largest up to %d, for %s bytes of sample text, "
                "that %d sample chunks support; set tokenizer.vocab_size to require a size)",
                learned.vocab_size,
                limit,
                f"{drawn.num_bytes:,}",
                len(drawn.chunks),
            )
        output.set_string_custom_property("vocab_size_choice", "auto" if options.vocab_size is None else "explicit")
        output.set_int_custom_property("vocab_size_limit", limit)
        output.set_int_custom_property("rare_characters_left_to_bytes", learned.rare_characters)
        proto = learned.proto
        output.set_string_custom_property("learned_from_examples", examples.uri)
        # ExampleGen's driver records the span as a custom property (the standard one stays 0).
        span = examples.get_int_custom_property(SPAN) if examples.has_custom_property(SPAN) else examples.span
        output.set_int_custom_property("learned_from_span", int(span))
        output.set_int_custom_property("sample_chunks", len(drawn.chunks))
        output.set_int_custom_property("sample_bytes", drawn.num_bytes)
        return proto


def _record_number_splitting(graph: tf.Module, chunks: List[str], output: types.Artifact, source: str) -> None:
    """Measures how the tokenizer splits the sample's numbers (numbers.py), records it on the
    artifact and warns when digits merge."""
    found = numbers.measure(graph, chunks)
    output.set_string_custom_property("number_splitting", found.to_json())
    if found.merges_digits:
        log.warning("Tokenizer (%s): %s", source, found.summary())
    else:
        log.info("Tokenizer (%s): %s", source, found.summary())


def _train_pattern(examples: types.Artifact) -> str:
    return os.path.join(artifact_utils.get_split_uri([examples], TRAIN_SPLIT), "*")


def _survivors(examples: types.Artifact) -> str:
    """'; N of M documents survived cleaning (rules that removed the most: ...)' from ExampleGen's
    ingest report on `examples`, or '' when it has none."""
    report = ingest_report.read_artifact_report(examples)
    if report is None:
        return ""
    return f"; {ingest_report.survival_line(report)}"


class TokenizerComponent(base_beam_component.BaseBeamComponent):
    """The Tokenizer stage (see the module docstring)."""

    SPEC_CLASS = TokenizerSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(TokenizerExecutor)

    def __init__(
        self,
        examples: types.BaseChannel,
        options: TokenizerOptions,
        text_feature: str,
        registry: RegistryOptions,
        model_name: str,
        registry_dir: str = "",
        checkpoint: str = "",
    ):
        super().__init__(
            spec=TokenizerSpec(
                examples=examples,
                options=options.to_parameter(),
                text_feature=text_feature,
                registry=registry.to_parameter(),
                model_name=model_name,
                registry_dir=registry_dir,
                checkpoint=checkpoint or "",
                tokenizer=types.Channel(type=Tokenizer),
            )
        )
