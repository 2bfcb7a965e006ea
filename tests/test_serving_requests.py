"""TF Serving readiness of the export: gRPC PredictRequests, warm-up records, the XLA variant.

The TF Serving binary cannot run here, so requests are built with `tensorflow-serving-api`
exactly as a gRPC client would, serialised to wire bytes and parsed back, then run against the
loaded SavedModel's signature in-process (what TF Serving's Predict handler does with them).
"""
import os

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tensorflow_serving.apis import predict_pb2

from components.trainer import export, serving_requests
from components.trainer.serving_compat import ops_stock_serving_cannot_load
from components.trainer.options import GenerationOptions


def _over_the_wire(request: predict_pb2.PredictRequest) -> predict_pb2.PredictRequest:
    return predict_pb2.PredictRequest.FromString(request.SerializeToString())


def test_a_grpc_generate_request_matches_the_signature_and_its_outputs(exported_model):
    model, _ = exported_model
    prompts = ["Hi Zoë,", "Thanks for writing about sync and settings"]
    inputs = serving_requests.generate_inputs(prompts, max_new_tokens=6, temperature=0.0, top_k=0, top_p=1.0, seed=0)
    request = _over_the_wire(serving_requests.predict_request("textgen", "generate", inputs))
    outputs = serving_requests.run_request(model, request)
    assert set(outputs) == {"generations", "num_generated_tokens"}
    assert outputs["generations"].shape == (2,) and outputs["num_generated_tokens"].dtype == np.int32
    assert ((outputs["num_generated_tokens"] >= 1) & (outputs["num_generated_tokens"] <= 6)).all()
    direct = model.signatures["generate"](**{key: tf.constant(value) for key, value in inputs.items()})
    assert outputs["generations"].tolist() == direct["generations"].numpy().tolist()


def test_a_grpc_score_request_returns_one_score_per_text(exported_model):
    model, _ = exported_model
    request = _over_the_wire(serving_requests.predict_request("textgen", "score", serving_requests.text_inputs("texts", ["ab", "hello there"])))
    outputs = serving_requests.run_request(model, request)
    assert outputs["mean_nll"].shape == (2,) and outputs["mean_nll"].dtype == np.float32
    assert outputs["num_tokens"].dtype == np.int64 and (outputs["num_tokens"] >= 2).all()


def test_a_request_with_a_wrongly_typed_input_is_rejected(exported_model):
    model, _ = exported_model
    inputs = serving_requests.generate_inputs(["Hi"], 4, 0.0, 0, 1.0, 0)
    inputs["top_p"] = np.array(1, np.int64)  # the signature declares float32
    request = _over_the_wire(serving_requests.predict_request("textgen", "generate", inputs))
    try:
        serving_requests.run_request(model, request)
    except (TypeError, ValueError, tf.errors.InvalidArgumentError):
        return
    raise AssertionError("an int64 top_p was accepted by a float32 input")


def test_warmup_records_are_present_parseable_and_servable(exported_model):
    model, export_dir = exported_model
    assert os.path.isfile(os.path.join(export_dir, serving_requests.WARMUP_FILE))
    requests = serving_requests.read_warmup_file(export_dir)
    assert [r.model_spec.signature_name for r in requests] == ["serving_default", "serving_default", "generate", "score"]
    batch_sizes = [r.inputs["prompts"].tensor_shape.dim[0].size for r in requests if "prompts" in r.inputs]
    assert batch_sizes == [1, 8, 1]
    for request in requests:
        text_key = "texts" if "texts" in request.inputs else "prompts"
        batch_size = request.inputs[text_key].tensor_shape.dim[0].size
        outputs = serving_requests.run_request(model, request)
        assert outputs and all(len(value) == batch_size for value in outputs.values())


def test_the_xla_export_is_serving_safe_and_decodes_like_the_default_one(exported_model, tiny_backbone, transform_artifacts, tmp_path):
    model, _ = exported_model
    generation = GenerationOptions(max_new_tokens=8, temperature=0.0, top_k=0, jit_compile=True)
    export_dir = str(tmp_path / "xla")
    export.export_serving_model(tiny_backbone, tft.TFTransformOutput(transform_artifacts[0]), generation, export_dir)
    assert ops_stock_serving_cannot_load(export_dir) == set()
    xla_model = tf.saved_model.load(export_dir)
    prompts = tf.constant(["a short one", "a considerably longer prompt than the other one"])
    expected = model.signatures["serving_default"](prompts=prompts)["generations"].numpy().tolist()
    assert xla_model.signatures["serving_default"](prompts=prompts)["generations"].numpy().tolist() == expected
