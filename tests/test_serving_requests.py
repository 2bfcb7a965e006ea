"""TF Serving readiness of the export: the signature contract, gRPC PredictRequests and REST
bodies, warm-up records, the XLA variant.

The TF Serving binary cannot run here, so requests are built with `tensorflow-serving-api`
exactly as a gRPC client would, serialised to wire bytes and parsed back, then run against the
loaded SavedModel's signature in-process (what TF Serving's Predict handler does with them).
"""

import base64
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from tensorflow_serving.apis import predict_pb2

from components.model_client import ModelClient
from components.trainer.options import GenerationOptions
from components.trainer.serving import export, predict_requests, signatures
from components.trainer.serving.compat import ops_stock_serving_cannot_load


def _over_the_wire(request: predict_pb2.PredictRequest) -> predict_pb2.PredictRequest:
    return predict_pb2.PredictRequest.FromString(request.SerializeToString())


def assert_signature_contract(model, names) -> None:
    """The loaded SavedModel `model` has exactly the signatures `names`, each with the inputs and
    outputs signatures.py declares."""
    assert set(model.signatures) == set(names)
    for name in names:
        declared = model.signatures[name].structured_input_signature[1]
        assert {key: (spec.dtype, tuple(spec.shape)) for key, spec in declared.items()} == {
            spec.name: (spec.dtype, spec.shape) for spec in signatures.INPUTS[name]
        }, name
        assert set(model.signatures[name].structured_outputs) == set(signatures.OUTPUTS[name]), name


def test_the_export_declares_exactly_the_signature_contract(exported_model):
    """One description (signatures.py) for the export, the client and the request builders; a
    model trained on text has every signature but the chat ones (test_chat_fidelity.py checks those)."""
    model, _ = exported_model
    assert_signature_contract(model, set(signatures.INPUTS) - set(signatures.CHAT_SIGNATURES))


GENERATE_ARGUMENTS = dict(max_new_tokens=6, temperature=0.0, top_k=0, top_p=1.0, seed=0)


def test_a_grpc_generate_request_matches_the_signature_and_its_outputs(exported_model):
    model, _ = exported_model
    prompts = ["Hi Zoë,", "Thanks for writing about sync and settings"]
    request = _over_the_wire(
        predict_requests.predict_request("textgen", "generate", prompts=prompts, **GENERATE_ARGUMENTS)
    )
    outputs = predict_requests.run_request(model, request)
    assert set(outputs) == {"generations", "num_generated_tokens"}
    assert outputs["generations"].shape == (2,) and outputs["num_generated_tokens"].dtype == np.int32
    assert ((outputs["num_generated_tokens"] >= 1) & (outputs["num_generated_tokens"] <= 6)).all()
    direct = ModelClient(model).call("generate", prompts=prompts, **GENERATE_ARGUMENTS)
    assert outputs["generations"].tolist() == direct["generations"].tolist()
    assert signatures.decode_texts(outputs["generations"]) == ModelClient(model).generate(prompts, **GENERATE_ARGUMENTS)


def test_a_rest_body_carries_the_same_typed_inputs_as_the_grpc_request(exported_model):
    """TF Serving's REST API converts JSON numbers to the signature's dtypes; the body built from
    the contract, read back that way, runs as the gRPC request does."""
    model, _ = exported_model
    prompts = ["Hi Zoë,"]
    body = json.loads(json.dumps(predict_requests.rest_request_body("generate", prompts=prompts, **GENERATE_ARGUMENTS)))
    assert body["signature_name"] == "generate" and body["inputs"]["prompts"] == prompts
    assert body["inputs"]["max_new_tokens"] == 6 and isinstance(body["inputs"]["max_new_tokens"], int)
    grpc_request = predict_requests.predict_request("textgen", "generate", prompts=prompts, **GENERATE_ARGUMENTS)
    from_rest = predict_requests.predict_request("textgen", "generate", **body["inputs"])
    assert from_rest == grpc_request
    assert (
        predict_requests.run_request(model, from_rest)["generations"].tolist()
        == predict_requests.run_request(model, grpc_request)["generations"].tolist()
    )


def _rest_value(spec: tf.TensorSpec, value):
    """One JSON value as TF Serving's REST API reads it into a tensor of `spec`'s dtype
    (tensorflow_serving/util/json_tensor.cc): a string is text or {"b64": ...}, an integer input
    takes JSON integers only, a float input any JSON number, a bool input true/false; the shape is
    the nesting of the lists."""
    if isinstance(value, list):
        return [_rest_value(spec, item) for item in value]
    if spec.dtype == tf.string:
        if isinstance(value, dict) and set(value) == {"b64"}:
            return base64.b64decode(value["b64"])
        assert isinstance(value, str), f"{spec.name}: a string input needs text or {{'b64': ...}}, not {value!r}"
        return value.encode("utf-8")
    if spec.dtype == tf.bool:
        assert isinstance(value, bool), f"{spec.name}: {value!r} is not a JSON bool"
    elif spec.dtype.is_integer:
        assert isinstance(value, int) and not isinstance(value, bool), f"{spec.name}: {value!r} is not a JSON integer"
    else:
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{spec.name}: {value!r} is no number"
    return value


def run_rest_body(model, body) -> dict:
    """Runs a REST predict body (columnar `inputs`) against the loaded SavedModel as TF Serving's
    REST handler does: the body goes through JSON text, each input is typed by the signature's
    declared TensorSpec (not by signatures.py), an input the signature lacks is an error."""
    body = json.loads(json.dumps(body))
    signature = model.signatures[body.get("signature_name", signatures.SERVING_DEFAULT)]
    declared = signature.structured_input_signature[1]
    assert set(body["inputs"]) <= set(declared), f"inputs the signature lacks: {set(body['inputs']) - set(declared)}"
    tensors = {}
    for name, value in body["inputs"].items():
        spec = declared[name]
        array = np.array(
            _rest_value(spec, value), dtype=object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype
        )
        assert spec.shape.is_compatible_with(array.shape), (
            f"{name}: shape {array.shape}, the signature declares {spec.shape}"
        )
        tensors[name] = tf.constant(array, spec.dtype)
    return {key: value.numpy() for key, value in signature(**tensors).items()}


def assert_rest_body_runs_as_the_grpc_request(model, signature_name: str, **values) -> dict:
    """The REST body of `values`, read as TF Serving reads it, answers as the gRPC request does."""
    body = predict_requests.rest_request_body(signature_name, **values)
    from_rest = run_rest_body(model, body)
    over_grpc = predict_requests.run_request(
        model, _over_the_wire(predict_requests.predict_request("textgen", signature_name, **values))
    )
    assert set(from_rest) == set(over_grpc) == set(signatures.OUTPUTS[signature_name])
    for key in over_grpc:
        np.testing.assert_array_equal(from_rest[key], over_grpc[key], err_msg=f"{signature_name}: {key}")
    return body


# Arguments of every signature of a model trained on text (the chat ones: test_chat_fidelity.py).
SIGNATURE_ARGUMENTS = {
    signatures.SERVING_DEFAULT: dict(prompts=["Hi Zoë,", "Thanks"]),
    signatures.GENERATE: dict(prompts=["Hi Zoë,"], **GENERATE_ARGUMENTS),
    signatures.SCORE: dict(texts=["ab", "hello there"]),
    signatures.SCORE_TOKENS: dict(blocks=[[1, 5, 9, 12, 7, 3, 2, 8, 4]] * 2),
    signatures.SCORE_CONTINUATION: dict(prefixes=["Hi", "Open"], continuations=[" Zoë", " Settings"]),
}


def test_every_signature_has_rest_arguments():
    assert set(SIGNATURE_ARGUMENTS) == set(signatures.INPUTS) - set(signatures.CHAT_SIGNATURES)


@pytest.mark.parametrize("signature_name", sorted(SIGNATURE_ARGUMENTS))
def test_the_rest_body_of_each_signature_is_what_tf_serving_reads_into_its_inputs(exported_model, signature_name):
    model, _ = exported_model
    assert_rest_body_runs_as_the_grpc_request(model, signature_name, **SIGNATURE_ARGUMENTS[signature_name])


def test_a_rest_body_carries_text_that_is_not_utf8_as_b64():
    body = predict_requests.rest_request_body(signatures.SCORE, texts=[b"\xff\xfeok", "Zoë"])
    assert body["inputs"]["texts"] == [{"b64": base64.b64encode(b"\xff\xfeok").decode("ascii")}, "Zoë"]


def test_the_documented_way_to_call_a_signature_without_textgen_runs(exported_model, capsys):
    """docs/serving.md, "Calling a signature without `textgen`": its Python block, on the model."""
    from pipeline.config import PROJECT_ROOT

    _, export_dir = exported_model
    with open(os.path.join(PROJECT_ROOT, "docs", "serving.md"), encoding="utf-8") as handle:
        page = handle.read()
    section = page[page.index("### Calling a signature without `textgen`") :]
    block = section[section.index("```python\n") + len("```python\n") : section.index("\n```\n")]
    assert 'tf.saved_model.load("runs/local/serving/1")' in block
    exec(block.replace("runs/local/serving/1", export_dir), {})
    printed = capsys.readouterr().out
    assert printed.endswith("]\n") and 1 <= int(printed[printed.rindex("[") + 1 : -2]) <= 20, printed


def test_a_grpc_score_request_returns_one_score_per_text(exported_model):
    model, _ = exported_model
    request = _over_the_wire(predict_requests.predict_request("textgen", "score", texts=["ab", "hello there"]))
    outputs = predict_requests.run_request(model, request)
    assert outputs["mean_nll"].shape == (2,) and outputs["mean_nll"].dtype == np.float32
    assert outputs["num_tokens"].dtype == np.int64 and (outputs["num_tokens"] >= 2).all()


def test_a_request_with_a_wrongly_typed_input_is_rejected(exported_model):
    model, _ = exported_model
    request = predict_requests.predict_request("textgen", "generate", prompts=["Hi"], **GENERATE_ARGUMENTS)
    request.inputs["top_p"].CopyFrom(tf.make_tensor_proto(np.array(1, np.int64)))  # the signature declares float32
    request = _over_the_wire(request)
    try:
        predict_requests.run_request(model, request)
    except (TypeError, ValueError, tf.errors.InvalidArgumentError):
        return
    raise AssertionError("an int64 top_p was accepted by a float32 input")


def test_warmup_records_are_present_parseable_and_servable(exported_model):
    model, export_dir = exported_model
    assert os.path.isfile(os.path.join(export_dir, predict_requests.WARMUP_FILE))
    requests = predict_requests.read_warmup_file(export_dir)
    assert [r.model_spec.signature_name for r in requests] == [
        "serving_default",
        "serving_default",
        "generate",
        "score",
    ]
    batch_sizes = [r.inputs["prompts"].tensor_shape.dim[0].size for r in requests if "prompts" in r.inputs]
    assert batch_sizes == [1, 8, 1]
    for request in requests:
        text_key = "texts" if "texts" in request.inputs else "prompts"
        batch_size = request.inputs[text_key].tensor_shape.dim[0].size
        outputs = predict_requests.run_request(model, request)
        assert outputs and all(len(value) == batch_size for value in outputs.values())


def test_the_xla_export_is_serving_safe_and_decodes_like_the_default_one(
    exported_model, tiny_backbone, transform_artifacts, tmp_path
):
    model, _ = exported_model
    generation = GenerationOptions(max_new_tokens=8, temperature=0.0, top_k=0, jit_compile=True)
    export_dir = str(tmp_path / "xla")
    export.export_serving_model(tiny_backbone, tft.TFTransformOutput(transform_artifacts[0]), generation, export_dir)
    assert ops_stock_serving_cannot_load(export_dir) == set()
    xla_model = tf.saved_model.load(export_dir)
    prompts = tf.constant(["a short one", "a considerably longer prompt than the other one"])
    expected = model.signatures["serving_default"](prompts=prompts)["generations"].numpy().tolist()
    assert xla_model.signatures["serving_default"](prompts=prompts)["generations"].numpy().tolist() == expected
