"""TF Serving requests for the exported signatures (gRPC and REST), and the model's warm-up file.

Requests are built from the signature description in `signatures.py`, the same one the export
declares its inputs from: `predict_request` makes the `tensorflow_serving.apis` proto a gRPC
client sends to `PredictionService/Predict`, `rest_request_body` the JSON body of
`POST /v1/models/<name>:predict`. TF Serving replays `assets.extra/tf_serving_warmup_requests`
(a TFRecord of `PredictionLog`s) when it loads a version, so the first user request does not pay
for graph initialisation (or, with the XLA export, compilation) of the common shapes.
"""

import base64
import os
from typing import Any, Dict, Sequence

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from components.trainer.serving import signatures

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def predict_request(model_name: str, signature_name: str, **values: Any) -> predict_pb2.PredictRequest:
    """A PredictRequest for `signature_name` with every input of it (typed as `signatures` declares)."""
    request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name))
    for key, value in signatures.typed_inputs(signature_name, values).items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


def _json_text(value: Any) -> Any:
    """A string input's value (a nested list of UTF-8 bytes) as JSON: the text as a JSON string, or
    `{"b64": ...}` where it is not valid UTF-8 (TF Serving's REST API decodes both into the tensor)."""
    if isinstance(value, list):
        return [_json_text(item) for item in value]
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(value).decode("ascii")}


def rest_request_body(signature_name: str, **values: Any) -> Dict[str, Any]:
    """The JSON body of TF Serving's REST predict API (columnar `inputs`) for the same arguments.

    Each input is a JSON value of the shape the signature declares: a scalar, a list, or a list of
    lists (`chat`'s and `score_replies`' [batch, turns] `roles` and `contents`); TF Serving types
    the numbers as the signature's dtypes.
    """
    inputs = {}
    for key, value in signatures.typed_inputs(signature_name, values).items():
        inputs[key] = _json_text(value.tolist()) if value.dtype == object else value.tolist()
    return {"signature_name": signature_name, "inputs": inputs}


def response_outputs(response: predict_pb2.PredictResponse) -> Dict[str, np.ndarray]:
    """A PredictResponse's outputs as numpy arrays (`signatures.decode_texts` turns text into str)."""
    return {key: tf.make_ndarray(proto) for key, proto in response.outputs.items()}


def run_request(loaded_model, request: predict_pb2.PredictRequest) -> Dict[str, np.ndarray]:
    """Runs a PredictRequest against a loaded SavedModel's signature, as TF Serving's Predict does."""
    signature = loaded_model.signatures[request.model_spec.signature_name or signatures.SERVING_DEFAULT]
    inputs = {key: tf.constant(tf.make_ndarray(proto)) for key, proto in request.inputs.items()}
    return {key: value.numpy() for key, value in signature(**inputs).items()}


def warmup_requests(generation, model_name: str = "textgen", chat: bool = False) -> list:
    """The requests replayed at load: serving_default at batch 1 and 8, sampled `generate`, `score`,
    and with `chat` (a model trained on conversations) a sampled `chat` of one user turn.

    `generation` is the GenerationOptions whose defaults the export uses; batch 1 and 8 cover the
    batch buckets most clients hit. A lone user turn is a conversation every chat template renders,
    so the `chat` request runs the whole render-and-decode path (TF Serving refuses to load a
    version whose warm-up request fails).
    """
    prompt = "Hello"
    sampling = dict(
        max_new_tokens=generation.max_new_tokens,
        temperature=max(generation.temperature, 0.7),
        top_k=generation.top_k,
        top_p=generation.top_p,
        seed=0,
    )
    requests = [
        predict_request(model_name, signatures.SERVING_DEFAULT, prompts=[prompt]),
        predict_request(model_name, signatures.SERVING_DEFAULT, prompts=[prompt] * 8),
        predict_request(model_name, signatures.GENERATE, prompts=[prompt], **sampling),
        predict_request(model_name, signatures.SCORE, texts=[prompt]),
    ]
    if chat:
        requests.append(predict_request(model_name, signatures.CHAT, roles=[["user"]], contents=[[prompt]], **sampling))
    return requests


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
