"""Typed options of the Trainer stage: the model's shape, training, the exported generate
signature's defaults and distributed training as a TFJob (composed into the pipeline config as
`model`, `training`, `generation` and `kubeflow.tfjob`)."""

from typing import Any, Dict, List, Literal, NamedTuple, Optional

from pydantic import Field, field_validator, model_validator

from components.options import Options
from components.registry.options import RegistryOptions
from components.resources import bundled

# Named model shapes: (num_layers, num_heads, model_dim, mlp_dim, context_length). "small" is the
# default the bundled corpus trains in minutes on a laptop CPU; "10m" is the benchmark shape;
# "gpt2-124m" is GPT-2 small's shape (124M parameters with its 50,257-token vocabulary).
MODEL_PRESETS: Dict[str, Dict[str, int]] = {
    "tiny": dict(num_layers=1, num_heads=2, model_dim=32, mlp_dim=64, context_length=32),
    "small": dict(num_layers=2, num_heads=4, model_dim=128, mlp_dim=512, context_length=128),
    "10m": dict(num_layers=6, num_heads=6, model_dim=384, mlp_dim=1536, context_length=256),
    "gpt2-124m": dict(num_layers=12, num_heads=12, model_dim=768, mlp_dim=3072, context_length=1024),
}


class RopeScaling(Options):
    """Llama 3's rotary frequency scaling (`rope_scaling` with rope_type `llama3` in a config.json):
    wavelengths longer than original_max_position_embeddings / low_freq_factor are stretched by
    `factor`, those shorter than original_max_position_embeddings / high_freq_factor are kept,
    and those between are interpolated (model/backbone.py `rotary_inverse_frequency`)."""

    factor: float = Field(..., gt=0.0)
    low_freq_factor: float = Field(..., gt=0.0)
    high_freq_factor: float = Field(..., gt=0.0)
    original_max_position_embeddings: int = Field(..., ge=1)

    @model_validator(mode="after")
    def _bands_are_ordered(self) -> "RopeScaling":
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError("model.rope_scaling.high_freq_factor must exceed low_freq_factor")
        return self


# The fields that describe the network (not training choices): with model.checkpoint they come
# from the checkpoint's config.json, and an explicitly given one that differs is an error.
ARCHITECTURE_FIELDS = (
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "model_dim",
    "mlp_dim",
    "position_encoding",
    "norm",
    "norm_epsilon",
    "mlp",
    "attention_bias",
    "mlp_bias",
    "tie_embeddings",
    "rope_theta",
    "rope_scaling",
)


class ModelOptions(Options):
    """Shape of the decoder-only Transformer: a named preset, any dimension overridable.

    The defaults are this project's own GPT-style model; the other options cover the GPT-2 and
    Llama families, whose checkpoints `checkpoint` imports (components/trainer/checkpoint/).
    """

    preset: Literal["tiny", "small", "10m", "gpt2-124m"] = Field(
        "small", description="Named shape; dimensions given explicitly override the preset's."
    )
    num_layers: int = Field(
        MODEL_PRESETS["small"]["num_layers"], ge=1, description="Transformer blocks (default: the preset's)."
    )
    num_heads: int = Field(
        MODEL_PRESETS["small"]["num_heads"],
        ge=1,
        description="Attention heads per block; must divide model_dim (default: the preset's).",
    )
    num_kv_heads: Optional[int] = Field(
        None,
        ge=1,
        description="Key/value heads (grouped-query attention; the KV cache holds only these); "
        "unset = num_heads (multi-head attention).",
    )
    model_dim: int = Field(
        MODEL_PRESETS["small"]["model_dim"],
        ge=8,
        description="Width of the residual stream and the embeddings (default: the preset's).",
    )
    mlp_dim: int = Field(
        MODEL_PRESETS["small"]["mlp_dim"], ge=8, description="Hidden width of each block's MLP (default: the preset's)."
    )
    context_length: int = Field(
        MODEL_PRESETS["small"]["context_length"],
        ge=8,
        description="Tokens per training block and the model's maximum context.",
    )
    position_encoding: Literal["learned", "rotary"] = Field(
        "learned", description="Learned absolute position embeddings, or rotary embeddings applied to queries and keys."
    )
    norm: Literal["layer", "rms"] = Field(
        "layer", description="LayerNorm (GPT-2) or RMSNorm (Llama), before each half-block and at the end."
    )
    norm_epsilon: float = Field(
        1e-5, gt=0.0, description="The norms' epsilon (config.json's layer_norm_epsilon / rms_norm_eps)."
    )
    mlp: Literal["gelu", "gelu_tanh", "swiglu"] = Field(
        "gelu",
        description="MLP kind: exact GELU, GELU with the tanh approximation (GPT-2), or SwiGLU gate/up/down (Llama).",
    )
    attention_bias: bool = Field(True, description="Biases on the Q/K/V and attention output projections.")
    mlp_bias: bool = Field(True, description="Biases on the MLP projections.")
    tie_embeddings: bool = Field(
        True, description="Output logits from the token embedding (tied) or from a separate output matrix."
    )
    rope_theta: float = Field(10000.0, gt=0.0, description="Rotary base (position_encoding=rotary).")
    rope_scaling: Optional[RopeScaling] = Field(
        None, description="Llama 3 rotary frequency scaling (position_encoding=rotary)."
    )
    dropout: float = Field(
        0.0, ge=0.0, lt=1.0, description="Dropout rate in training (0 with training.recompute or sharded training)."
    )
    checkpoint: Optional[str] = Field(
        None,
        description="A Hugging Face checkpoint directory or URI (config.json, safetensors weights, tokenizer files) "
        "to fine-tune; the model's shape then comes from its config.json (issue 22).",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, values: Any) -> Any:
        # With a checkpoint the shape comes from its config.json: no preset is merged, so the
        # fields set are exactly those the user gave (checked against the checkpoint's).
        if isinstance(values, dict) and not values.get("checkpoint"):
            preset = MODEL_PRESETS.get(values.get("preset", "small"), {})
            values = {**preset, **values}
        return values

    @model_validator(mode="after")
    def _heads_divide_width(self) -> "ModelOptions":
        if self.checkpoint and not {"model_dim", "num_heads"} <= self.model_fields_set:
            return self  # the shape comes from config.json; checked once resolved (checkpoint_model_options)
        if self.model_dim % self.num_heads:
            raise ValueError(
                f"model.model_dim ({self.model_dim}) must be divisible by model.num_heads ({self.num_heads})"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(
                f"model.num_heads ({self.num_heads}) must be divisible by model.num_kv_heads ({self.kv_heads})"
            )
        if self.position_encoding == "rotary" and (self.model_dim // self.num_heads) % 2:
            raise ValueError("rotary positions need an even head size (model.model_dim / model.num_heads)")
        return self

    @property
    def kv_heads(self) -> int:
        """Key/value heads actually used (num_kv_heads, or num_heads when unset)."""
        return self.num_kv_heads or self.num_heads

    def to_parameter(self) -> str:
        """As `Options.to_parameter`; with a checkpoint, only the fields the user gave cross, so the
        Trainer can tell them from defaults when it takes the rest from config.json."""
        return self.model_dump_json(exclude_unset=self.checkpoint is not None)


class LoraOptions(Options):
    """Low-rank adaptation (components/trainer/model/lora.py): rank 0 trains every weight."""

    rank: int = Field(0, ge=0, description="Rank of the adapters; 0 = LoRA off (full training).")
    alpha: float = Field(16.0, gt=0.0, description="Scale of the update: alpha / rank.")
    targets: List[Literal["attention", "mlp"]] = Field(
        ["attention"],
        min_length=1,
        description="Projections that get adapters: attention (fused query/key/value and output), mlp (every MLP projection).",
    )
    frozen_dtype: Literal["auto", "bfloat16", "float32"] = Field(
        "auto",
        description="How the frozen weights (embeddings, projection kernels and biases) are stored under "
        "mixed_bfloat16 precision, which reads them as bfloat16 in every matmul anyway: auto = "
        "bfloat16 when that loses nothing (a bfloat16 model.checkpoint, no training.warm_start), "
        "half their float32 memory; bfloat16 = always, rounding float32 values once (training "
        "computes the same, but the float32 exports then hold the rounded values); float32 = never. "
        "Other precisions keep float32. Adapters and norms are float32 either way.",
    )


RECOMPUTE_MODES = ("off", "attention", "block")


def check_recompute(mode: str, model: ModelOptions) -> None:
    """Raises ValueError, naming the settings, for a `training.recompute` mode `model` cannot train
    with: a recomputed dropout would draw another mask than the forward pass (model/recompute.py)."""
    if mode not in RECOMPUTE_MODES:
        raise ValueError(f"training.recompute must be one of {', '.join(RECOMPUTE_MODES)}, not {mode!r}")
    if mode != "off" and model.dropout > 0:
        raise ValueError(
            f"training.recompute={mode} needs model.dropout=0 (a recomputed dropout draws another mask), "
            f"not {model.dropout}"
        )


class ShardingOptions(Options):
    """A `batch` x `model` device mesh for sharded (DTensor) training: `training.sharding`.

    Sharded training is on when the mesh has more than one device (`enabled`): the Trainer then
    trains with components/trainer/training/sharded_loop.py over this host's GPUs (or, without
    GPUs, logical CPU devices) instead of a tf.distribute strategy, and exports the gathered,
    ordinary model. `check_sharding` lists the settings it cannot be combined with."""

    batch: int = Field(
        1, ge=1, description="Mesh devices along the batch axis (data parallelism: batch rows split over them)."
    )
    model: int = Field(
        1,
        ge=1,
        description="Mesh devices along the model axis (tensor parallelism: embeddings, attention and MLP "
        "matrices and their optimizer slots split over them); must divide model_dim and mlp_dim.",
    )

    @property
    def devices(self) -> int:
        """Devices in the mesh (batch x model)."""
        return self.batch * self.model

    @property
    def enabled(self) -> bool:
        """True when the mesh has more than one device."""
        return self.devices > 1


class TrainingOptions(Options):
    """Optimisation, speed, distribution and checkpoint settings for the Trainer's run_fn."""

    train_steps: int = Field(300, ge=1, description="Optimizer steps in total (a resumed run finishes the remainder).")
    batch_size: int = Field(32, ge=1, description="Sequences per global batch (across all replicas and micro-batches).")
    global_batch_tokens: Optional[int] = Field(
        None,
        ge=8,
        description="Tokens per global batch; when set, replaces batch_size (must be a multiple of the context length).",
    )
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="Micro-batches per optimizer step; the global batch is split into this many."
    )
    learning_rate: float = Field(
        3e-3,
        gt=0.0,
        description="Peak AdamW learning rate (cosine decay to 10% after the warm-up); unless set, 5e-5 when fine-tuning model.checkpoint, 2e-4 with LoRA.",
    )
    warmup_steps: int = Field(30, ge=0, description="Steps of linear learning-rate warm-up.")
    weight_decay: float = Field(0.01, ge=0.0, description="AdamW weight decay (not applied to norms and biases).")
    clip_norm: float = Field(1.0, gt=0.0, description="Global gradient-norm clipping threshold.")
    shuffle_buffer: int = Field(2048, ge=1, description="Packed training blocks held in the shuffle buffer.")
    seed: int = Field(42, description="Seed of weight initialisation and shuffling.")
    precision: Literal["auto", "float32", "mixed_bfloat16", "mixed_float16"] = Field(
        "auto",
        description="Keras mixed-precision policy; auto = mixed_float16 on GPU, mixed_bfloat16 on TPU and on a CPU "
        "with native bfloat16 (AMX-BF16/AVX512-BF16), else float32 (components/trainer/training/precision.py).",
    )
    jit_compile: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Compile the forward/backward step with XLA; auto = on, except on a CPU under "
        "mixed_bfloat16 (XLA's CPU backend cannot compile every bfloat16 dot), and graph mode with "
        "a warning where XLA cannot compile the step; on = XLA or an error (precision.py).",
    )
    steps_per_call: int = Field(
        10, ge=1, description="Train steps run inside one tf.function call (fewer Python round trips)."
    )
    distribution: Literal["auto", "default", "mirrored", "multi_worker", "parameter_server", "tpu"] = Field(
        "auto",
        description="tf.distribute strategy; auto picks TPU, parameter_server (TF_CONFIG with ps tasks), "
        "multi-worker (TF_CONFIG), mirrored (>1 GPU) or default.",
    )
    tpu: str = Field(
        "",
        description="TPU name or grpc:// address for TPUStrategy (empty: the TPU_NAME environment variable or local).",
    )
    log_every: int = Field(30, ge=1, description="Steps between progress lines and TensorBoard summaries.")
    eval_batches: int = Field(8, ge=0, description="Eval-split batches measured at each progress line (0 disables).")
    checkpoint_every: int = Field(
        100, ge=1, description="Steps between checkpoints in the ModelRun directory (resume points)."
    )
    keep_best_eval: bool = Field(
        True,
        description="Export the weights of the lowest eval loss measured (at each progress line) rather than the "
        "last step's, when a later step did worse (a small corpus memorised); needs eval_batches > 0.",
    )
    early_stopping_patience: int = Field(
        3,
        ge=0,
        description="Stop training after this many progress-line eval measurements in a row without a lower "
        "eval loss (0: always train train_steps steps); needs eval_batches > 0.",
    )
    recompute: Literal["off", "attention", "block"] = Field(
        "off",
        description="Activation recomputation: off keeps every activation for the backward pass; attention "
        "recomputes the attention scores and softmax in the backward pass, in query chunks (their "
        "memory grows with the square of the context; little extra time); block keeps only each "
        "Transformer block's input and recomputes the whole block (least memory, about one more "
        "forward pass of time). Both need model.dropout=0 (model/recompute.py).",
    )
    lora: LoraOptions = Field(default_factory=LoraOptions, description="Low-rank adaptation; base weights frozen.")
    sharding: ShardingOptions = Field(
        default_factory=ShardingOptions,
        description="Sharded (DTensor) training over a batch x model mesh of this "
        "host's devices; on when batch x model > 1 (training/sharded_loop.py).",
    )
    loss_on: Literal["assistant", "all"] = Field(
        "assistant",
        description="Conversation data only: which tokens the loss is taken on: assistant (the replies "
        "and their end-of-turn token, as TRL, torchtune and axolotl train by default) or all "
        "(every token of the rendered conversation, the template's own included).",
    )
    warm_start: bool = Field(
        False,
        description="Initialise from the model the registry serves as production when its tokenizer (sha256) "
        "and weights (names and shapes) match; with training.lora its merged weights are the frozen "
        "base and new adapters train on top.",
    )
    peak_flops: Optional[float] = Field(
        None, gt=0.0, description="Device peak FLOP/s for MFU; measured with a matmul at start when unset."
    )
    export_process: Literal["auto", "child", "inline"] = Field(
        "auto",
        description="Where the serving and Hugging Face exports run: child (a separate process, so the memory "
        "TensorFlow keeps after an export, about 4 bytes a parameter each, goes back to the system "
        "before the Evaluator), inline (the Trainer's process) or auto (child from 250M parameters "
        "when the Trainer is one process: default or mirrored distribution, no sharding).",
    )

    @field_validator("jit_compile", mode="before")
    @classmethod
    def _yaml_switch_words(cls, value: Any) -> Any:
        """YAML reads `on`/`off` (in a config file or `--set training.jit_compile=off`) as booleans."""
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("recompute", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        """YAML reads `off` (`--set training.recompute=off`) as False."""
        return "off" if value is False else value

    def resolved_batch_size(self, context_length: int) -> int:
        """Sequences per global batch, from global_batch_tokens when set."""
        if self.global_batch_tokens is None:
            return self.batch_size
        if self.global_batch_tokens % context_length:
            raise ValueError(
                f"training.global_batch_tokens ({self.global_batch_tokens}) must be a multiple of model.context_length ({context_length})"
            )
        return self.global_batch_tokens // context_length


def check_shardable(model: ModelOptions, sharding: ShardingOptions) -> None:
    """Raises ValueError when a dimension the mesh's `model` axis splits is not divisible by it."""
    width = 2 * model.mlp_dim if model.mlp == "swiglu" else model.mlp_dim
    for name, size in (("model.model_dim", model.model_dim), ("model.mlp_dim", width)):
        if size % sharding.model:
            raise ValueError(
                f"{name} ({size}) must be divisible by the mesh's model axis (training.sharding.model={sharding.model})"
            )


def check_sharding(training: TrainingOptions, model: ModelOptions) -> None:
    """Raises ValueError, naming the setting, for what sharded training (`training.sharding` with more
    than one device) cannot be combined with; does nothing when sharding is off.

    Refused: an explicit training.distribution (the mesh replaces tf.distribute strategies;
    multi-client DTensor is not supported), jit_compile=on (XLA), mixed precision (mixed_float16's
    loss scaling; under mixed_bfloat16 tf_keras's AdamW cannot create the slots of the autocast
    sharded weights: "Neither layout nor DTensor initial value are provided"), LoRA, activation recomputation, gradient accumulation, dropout (not verified to draw the same
    mask on the devices of a replicated activation), warm starts and Hugging Face checkpoints (the
    sharded model is built from scratch). The `auto` settings resolve to supported values instead
    (training/sharded_loop.py)."""
    sharding = training.sharding
    if not sharding.enabled:
        return
    mesh = f"training.sharding (batch={sharding.batch} x model={sharding.model})"
    refused = [
        (
            training.distribution != "auto",
            f"training.distribution={training.distribution}",
            "the mesh replaces tf.distribute strategies and multi-client DTensor is not supported; leave it auto",
        ),
        (
            training.jit_compile == "on",
            "training.jit_compile=on",
            "XLA is not supported with sharding; use auto or off",
        ),
        (
            training.precision.startswith("mixed_"),
            f"training.precision={training.precision}",
            "mixed precision is not supported with sharding; use auto (float32 there) or float32",
        ),
        (
            training.lora.rank > 0,
            f"training.lora.rank={training.lora.rank}",
            "LoRA adapters are not supported with sharding",
        ),
        (
            training.recompute != "off",
            f"training.recompute={training.recompute}",
            "activation recomputation is not supported with sharding",
        ),
        (
            training.gradient_accumulation_steps > 1,
            f"training.gradient_accumulation_steps={training.gradient_accumulation_steps}",
            "gradient accumulation is not supported with sharding; raise training.sharding.batch instead",
        ),
        (training.warm_start, "training.warm_start=true", "the sharded model is built from scratch"),
        (bool(model.checkpoint), "model.checkpoint", "the sharded model is built from scratch, not from a checkpoint"),
        (
            model.dropout > 0,
            f"model.dropout={model.dropout}",
            "dropout under sharding is not verified (each device draws its own mask); set model.dropout=0",
        ),
    ]
    for bad, setting, reason in refused:
        if bad:
            raise ValueError(f"{setting} cannot be combined with {mesh}: {reason}")
    check_shardable(model, sharding)
    batch = training.resolved_batch_size(model.context_length)
    if batch % sharding.batch:
        raise ValueError(
            f"the global batch ({batch} sequences) must be divisible by training.sharding.batch ({sharding.batch})"
        )


class GenerationOptions(Options):
    """Defaults of the exported `generate` signature and of the run's sample generations."""

    max_new_tokens: int = Field(160, ge=1, description="Tokens generated per prompt unless a request says otherwise.")
    temperature: float = Field(0.8, ge=0.0, description="0 means greedy decoding.")
    top_k: int = Field(20, ge=0, description="0 disables top-k filtering.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass; 1.0 disables top-p filtering.")
    jit_compile: bool = Field(
        False,
        description="Compile the exported decoding loop with XLA (TF Serving then needs --xla_cpu_compilation_enabled=true on CPU).",
    )
    weight_quantization: Literal["none", "int8"] = Field(
        "none",
        description="Weights of the exported model: none (float) or int8 (per-output-channel scales, dequantized in the matmul with core ops; stock TF Serving loads it).",
    )
    prompts_file: str = Field(bundled("data/prompts.txt"), description="Sample prompts printed after a local run.")
    chat_prompts_file: str = Field(
        bundled("data/chat_prompts.txt"),
        description="Sample user messages a model tuned on conversations answers after a local run (through its chat "
        "template; one per line, as prompts_file).",
    )
    num_samples: int = Field(3, ge=0, description="How many sample prompts to generate from after a run.")


class TFJobOptions(Options):
    """Distributed training as a Kubeflow Training Operator TFJob (chief + workers, TF_CONFIG set by the operator)."""

    enabled: bool = Field(
        False, description="Launch the Trainer's training as a TFJob instead of in the Trainer's pod."
    )
    workers: int = Field(2, ge=0, description="Worker replicas besides the chief.")
    parameter_servers: int = Field(
        0,
        ge=0,
        description="PS replicas; more than 0 makes it a parameter-server TFJob (the chief coordinates, "
        "workers and parameter servers serve; set training.distribution=parameter_server or auto).",
    )
    worker_restarts: int = Field(
        3,
        ge=0,
        description="Parameter-server TFJobs only: how many times in all Worker pods killed by a signal "
        "(exit code >= 128: OOM kill, preemption, SIGTERM) are recreated while training goes on; "
        "one more fails the Trainer. 0 = a lost worker fails the job. Chief and PS never restart.",
    )
    image: str = Field("", description="Replica image; empty = kubeflow.image.")
    cpu: str = Field("4", description="CPU request/limit per replica.")
    memory: str = Field("16Gi", description="Memory request/limit per replica.")
    gpus: int = Field(0, ge=0, description="nvidia.com/gpu per replica.")
    service_account: str = Field("", description="Kubernetes service account of the replicas (object-store access).")
    poll_seconds: float = Field(
        10.0, gt=0, description="How often the Trainer reads the TFJob's status while it waits."
    )
    timeout_seconds: float = Field(
        24 * 3600.0, gt=0, description="Fail the Trainer if the TFJob has not finished by then."
    )

    @model_validator(mode="after")
    def _parameter_servers_need_workers(self) -> "TFJobOptions":
        if self.parameter_servers and not self.workers:
            raise ValueError(
                f"parameter_servers={self.parameter_servers} needs workers >= 1 (the workers run the steps; "
                "the parameter servers only hold the variables)"
            )
        return self


class TrainerSettings(NamedTuple):
    """Everything the Trainer's run_fn reads from TFX's `custom_config` (`trainer_custom_config`)."""

    model: ModelOptions
    training: TrainingOptions
    generation: GenerationOptions
    registry: RegistryOptions  # where the production model (warm start) is looked up ...
    model_name: str  # ... under this registered serving name ...
    registry_dir: str  # ... in this embedded store ("" where the registry is a server)
    tfjob: TFJobOptions  # its `image` already resolved against kubeflow.image
    tfjob_namespace: str


def trainer_custom_config(settings: TrainerSettings) -> Dict[str, Any]:
    """The stock Trainer's `custom_config`: each options object as its JSON text, locations as strings."""
    return {
        name: value.to_parameter() if isinstance(value, Options) else value
        for name, value in settings._asdict().items()
    }


def read_trainer_custom_config(custom_config: Dict[str, Any]) -> TrainerSettings:
    """Parses `trainer_custom_config`'s dict with the same option classes."""
    values = {}
    for name, kind in TrainerSettings.__annotations__.items():
        raw = custom_config.get(name)
        if isinstance(kind, type) and issubclass(kind, Options):
            values[name] = kind.from_parameter(raw) if raw else kind()
        else:
            values[name] = raw or ""
    return TrainerSettings(**values)
