"""TF Serving requests for the exported signatures, and the model's warm-up file.

Requests are `tensorflow_serving.apis` protos, exactly what a gRPC client sends to
`PredictionService/Predict`. TF Serving replays `assets.extra/tf_serving_warmup_requests`
(a TFRecord of `PredictionLog`s) when it loads a version, so the first user request does not pay
for graph initialisation (or, with the XLA export, compilation) of the common shapes.
"""
import os
from typing import Dict, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def predict_request(model_name: str, signature_name: str, inputs: Mapping[str, np.ndarray]) -> predict_pb2.PredictRequest:
    """A PredictRequest whose inputs are the given arrays (dtypes as the signature declares them)."""
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name)
    )
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


def generate_inputs(
    prompts: Sequence[str], max_new_tokens: int, temperature: float, top_k: int, top_p: float, seed: int
) -> Dict[str, np.ndarray]:
    """The `generate` signature's inputs, typed as it declares them."""
    return {
        "prompts": np.array([p.encode("utf-8") for p in prompts], dtype=object),
        "max_new_tokens": np.array(max_new_tokens, np.int32),
        "temperature": np.array(temperature, np.float32),
        "top_k": np.array(top_k, np.int32),
        "top_p": np.array(top_p, np.float32),
        "seed": np.array(seed, np.int64),
    }


def text_inputs(key: str, texts: Sequence[str]) -> Dict[str, np.ndarray]:
    """A [batch] string input (`prompts` of serving_default, `texts` of score)."""
    return {key: np.array([t.encode("utf-8") for t in texts], dtype=object)}


def run_request(loaded_model, request: predict_pb2.PredictRequest) -> Dict[str, np.ndarray]:
    """Runs a PredictRequest against a loaded SavedModel's signature, as TF Serving's Predict does."""
    signature = loaded_model.signatures[request.model_spec.signature_name or "serving_default"]
    inputs = {key: tf.constant(tf.make_ndarray(proto)) for key, proto in request.inputs.items()}
    return {key: value.numpy() for key, value in signature(**inputs).items()}


def warmup_requests(generation, model_name: str = "textgen") -> list:
    """The requests replayed at load: serving_default at batch 1 and 8, sampled `generate`, `score`.

    `generation` is the GenerationOptions whose defaults the export uses; batch 1 and 8 cover the
    batch buckets most clients hit.
    """
    prompt = "Hello"
    sampled = generate_inputs(
        [prompt], generation.max_new_tokens, max(generation.temperature, 0.7), generation.top_k, generation.top_p, 0
    )
    return [
        predict_request(model_name, "serving_default", text_inputs("prompts", [prompt])),
        predict_request(model_name, "serving_default", text_inputs("prompts", [prompt] * 8)),
        predict_request(model_name, "generate", sampled),
        predict_request(model_name, "score", text_inputs("texts", [prompt])),
    ]


def write_warmup_file(export_dir: str, requests: Sequence[predict_pb2.PredictRequest]) -> str:
    """Writes the requests as PredictionLog records to `<export_dir>/assets.extra/...`; returns its path."""
    path = os.path.join(export_dir, WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return path


def read_warmup_file(export_dir: str) -> list:
    """The PredictRequests in a SavedModel's warm-up file (raises if a record is not a PredictionLog)."""
    path = os.path.join(export_dir, WARMUP_FILE)
    return [
        prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        for record in tf.data.TFRecordDataset(path)
    ]
