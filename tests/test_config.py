"""The typed configuration surface: defaults, YAML and flag layering, rejection of bad keys."""

import json
import re

import pytest

from pipeline.config import ConfigError, PipelineConfig, describe_options, load_config


def test_defaults_are_valid_and_paths_derive_from_output_root():
    config = load_config()
    assert config == PipelineConfig()
    assert config.layout.metadata_path.endswith("runs/local/metadata.sqlite")
    assert config.layout.serving_dir.endswith("runs/local/serving")


def test_yaml_then_overrides_then_flags_win_in_order(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("training:\n  train_steps: 10\n  batch_size: 4\noutput_root: /tmp/a\n")
    config = load_config(str(path), ["training.train_steps=20"], output_root="/tmp/b", data_root=None)
    assert config.training.train_steps == 20
    assert config.training.batch_size == 4
    assert config.output_root == "/tmp/b"


def test_xla_switch_words_survive_yaml(tmp_path):
    """YAML 1.1 reads on/off as booleans; the documented words must still work, in files and --set."""
    assert load_config(overrides=["training.jit_compile=off"]).training.jit_compile == "off"
    assert load_config(overrides=["training.jit_compile=on"]).training.jit_compile == "on"
    path = tmp_path / "config.yaml"
    path.write_text("training:\n  jit_compile: off\n")
    assert load_config(str(path)).training.jit_compile == "off"


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainig.train_steps=3", "unknown key 'trainig'"),
        ("training.steps=3", "unknown key 'training.steps'"),
        ("training.train_steps=lots", "training.train_steps"),
        ("model.model_dim=130", "divisible by model.num_heads"),
        ("no_equals_sign", "must look like section.key=value"),
    ],
)
def test_bad_keys_and_values_are_rejected_with_the_key_named(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("'", "'")):
        load_config(overrides=[override])


def test_unknown_key_in_yaml_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("evaluator:\n  max_perplexty: 3\n")
    with pytest.raises(ConfigError) as error:
        load_config(str(path))
    assert str(path) in str(error.value) and "evaluator.max_perplexty" in str(error.value)


def test_unreadable_and_malformed_yaml_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("training: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(bad))


def test_every_leaf_option_is_described():
    lines = describe_options()
    assert any(line.startswith("training.train_steps = ") for line in lines)
    assert any(line.startswith("kubeflow.image = ") for line in lines)
    assert len(lines) == len({line.split(" = ")[0] for line in lines})


def test_every_listed_default_is_yaml_that_sets_the_default_again():
    """`textgen options` writes values as --set and --config take them (null, true, [a, b]), not
    as Python's repr (None, True, ['a', 'b'])."""
    listed = dict(re.match(r"^(\S+) = (.*?)(?:  .*)?$", line).groups() for line in describe_options())
    assert (listed["tokenizer.vocab_size"], listed["enable_cache"], listed["kubeflow.host"]) == ("null", "true", "''")
    assert listed["kubeflow.tfjob.cpu"] == "'4'"
    assert not [key for key, value in listed.items() if value in ("None", "True", "False") or "['" in value]
    assert load_config(overrides=[f"{key}={value}" for key, value in listed.items()]) == PipelineConfig()


def test_example_gen_options_reach_the_executor_unchanged():
    """The ExampleGen executor parses the options the pipeline serialized back to equal objects,
    with the evaluator's suites added to the decontamination files."""
    from components.example_gen.component import custom_config
    from components.example_gen.executor import custom_options
    from pipeline.pipeline import cleaning_options

    config = load_config(overrides=["example_gen.jsonl_text_field=body", "cleaning.min_chars=7"])
    properties = {"custom_config": json.dumps(custom_config(config.example_gen, cleaning_options(config)))}
    example_gen, cleaning = custom_options(properties)
    assert example_gen == config.example_gen and example_gen.jsonl_text_field == "body"
    assert cleaning.min_chars == 7
    assert cleaning.decontamination.files == [
        config.evaluator.safety.prompts_file,
        config.evaluator.bias.templates_file,
    ]
    assert cleaning.model_copy(update={"decontamination": config.cleaning.decontamination}) == config.cleaning


def test_cleaning_config_rejects_bands_that_do_not_divide_permutations():
    with pytest.raises(ConfigError, match="cleaning.lsh_bands"):
        load_config(overrides=["cleaning.lsh_bands=30"])


def test_moved_keys_name_their_new_place():
    with pytest.raises(
        ConfigError, match=r"'transform.vocab_size' moved to 'tokenizer.vocab_size' \(see docs/tokenizers.md\)"
    ):
        load_config(overrides=["transform.vocab_size=2048"])
    with pytest.raises(
        ConfigError, match="'evaluator.max_perplexity_increase' moved to 'evaluator.max_bits_per_byte_increase"
    ):
        load_config(overrides=["evaluator.max_perplexity_increase=0.1"])
    config = load_config(overrides=["tokenizer.vocab_size=2048", "tokenizer.policy=learn"])
    assert (config.tokenizer.vocab_size, config.tokenizer.policy) == (2048, "learn")
    with pytest.raises(ConfigError, match="tokenizer"):
        load_config(overrides=["tokenizer.policy=pinned"])


def test_curation_options_are_set_by_dotted_keys_and_unknown_ones_rejected():
    config = load_config(
        overrides=["cleaning.quality.min_words=3", "cleaning.decontamination.ngram=8", "cleaning.languages=[en, zh]"]
    )
    assert config.cleaning.quality.min_words == 3 and config.cleaning.decontamination.ngram == 8
    assert config.cleaning.languages == ["en", "zh"]
    with pytest.raises(ConfigError, match="bogus"):
        load_config(overrides=["cleaning.quality.bogus=1"])
    with pytest.raises(ConfigError, match="max_short_lines_fraction"):
        load_config(overrides=["cleaning.quality.max_short_lines_fraction=2"])


def test_fine_tuning_a_checkpoint_lowers_the_default_learning_rate_but_keeps_an_explicit_one():
    scratch = load_config()
    full = load_config(overrides=["model.checkpoint=/ckpt/gpt2"])
    adapters = load_config(overrides=["model.checkpoint=/ckpt/gpt2", "training.lora.rank=8"])
    explicit = load_config(overrides=["model.checkpoint=/ckpt/gpt2", "training.learning_rate=0.01"])
    assert scratch.training.learning_rate == 3e-3
    assert full.training.learning_rate == 5e-5
    assert adapters.training.learning_rate == 2e-4
    assert explicit.training.learning_rate == 0.01
    assert adapters.training.lora.targets == ["attention"]
    with pytest.raises(ConfigError, match="training.lora.targets"):
        load_config(overrides=["training.lora.targets=[embeddings]"])


def test_step_resources_given_for_a_step_are_merged_into_its_default_pod():
    """`kubeflow.step_resources.Trainer={cpu_limit: 16, cpu_request: 8}` raises the Trainer's CPUs and
    keeps its memory; a step without a default pod starts from kubeflow.resources."""
    config = load_config(
        overrides=[
            "kubeflow.step_resources.Trainer={cpu_limit: 16, cpu_request: 8}",
            "kubeflow.resources.memory_limit_gb=12",
            "kubeflow.step_resources.ExampleGen={cpu_limit: 3}",
        ]
    )
    defaults = PipelineConfig().kubeflow.step_resources
    trainer, example_gen = config.kubeflow.step_resources["Trainer"], config.kubeflow.step_resources["ExampleGen"]
    assert (trainer.cpu_request, trainer.cpu_limit) == (8, 16)
    assert (
        (trainer.memory_request_gb, trainer.memory_limit_gb)
        == (defaults["Trainer"].memory_request_gb, defaults["Trainer"].memory_limit_gb)
        == (16, 32)
    )
    assert (example_gen.cpu_limit, example_gen.memory_limit_gb, example_gen.cpu_request) == (3, 12, 1)
    assert config.kubeflow.step_resources["Transform"] == defaults["Transform"]
    with pytest.raises(ConfigError, match="kubeflow.step_resources.Trainer"):  # the merged pod is still checked
        load_config(overrides=["kubeflow.step_resources.Trainer={cpu_request: 12}"])


def test_parameter_servers_without_workers_is_a_configuration_error():
    with pytest.raises(ConfigError, match=r"kubeflow.tfjob: .*parameter_servers=1 needs workers >= 1"):
        load_config(overrides=["kubeflow.tfjob.parameter_servers=1", "kubeflow.tfjob.workers=0"])
    config = load_config(overrides=["kubeflow.tfjob.parameter_servers=1", "kubeflow.tfjob.workers=1"])
    assert (config.kubeflow.tfjob.parameter_servers, config.kubeflow.tfjob.workers) == (1, 1)


def test_every_key_has_a_description():
    """The configuration reference (docs/config-reference.md) lists a description for every key."""
    assert not [line for line in describe_options() if "  " not in line]


def test_the_step_count_reaches_the_trainer_one_way():
    """`training.train_steps` reaches run_fn inside custom_config, with the other training options;
    TFX's TrainArgs stays at its default, so fn_args.train_steps (which run_fn does not read) holds
    no second copy that could disagree."""
    from components.trainer.options import read_trainer_custom_config
    from pipeline.pipeline import create_pipeline

    pipeline = create_pipeline(load_config(overrides=["training.train_steps=17"]))
    trainer = next(component for component in pipeline.components if component.id == "Trainer")
    settings = read_trainer_custom_config(json.loads(trainer.exec_properties["custom_config"]))
    assert settings.training.train_steps == 17
    assert json.loads(trainer.exec_properties["train_args"]) == {}
