"""The tensors of a Hugging Face checkpoint's safetensors files, read one at a time as float32 numpy.

A checkpoint has either one `model.safetensors` or shards listed in `model.safetensors.index.json`
(`weight_map`: tensor name -> shard file). Each file's header (a little-endian u64 length, then
JSON: name -> dtype, shape, byte offsets) is read once, so names and shapes are known before any
tensor is; a tensor is then read alone and its file unmapped again, so importing never holds the
checkpoint twice (only the backbone's variables and the tensor being copied into them).

float32/float16 tensors are read with safetensors' numpy API (`safe_open(..., framework="np")`);
numpy has no bfloat16, so a BF16 tensor's bytes are read at its offsets and widened to float32
(a bfloat16 is the upper half of a float32's bits).

Paths go through tf.io.gfile: a file on another filesystem (gs://, s3:// where registered) is
first copied to a local temporary directory (removed on `close`), because safetensors opens local
paths only.
"""
import json
import os
import posixpath
import shutil
import struct
import tempfile
from typing import Dict, List, NamedTuple, Tuple

import numpy as np
import tensorflow as tf
from safetensors import safe_open

from components.trainer.checkpoint.errors import CheckpointError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
_HEADER_LENGTH_BYTES = 8


class TensorInfo(NamedTuple):
    """Where one tensor is and what it is (from its file's header)."""

    file: str  # the checkpoint's file name (relative to the directory)
    dtype: str  # safetensors dtype code: F32, F16, BF16, ...
    shape: Tuple[int, ...]
    begin: int  # byte offsets into the data section
    end: int


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def read_header(path: str, file_name: str) -> Tuple[Dict[str, TensorInfo], int]:
    """(name -> TensorInfo, offset of the data section) of the local safetensors file `path`."""
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(_HEADER_LENGTH_BYTES))
            header = json.loads(handle.read(length))
    except (struct.error, ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not a safetensors file ({error})") from None
    header.pop("__metadata__", None)
    tensors = {
        name: TensorInfo(file_name, entry["dtype"], tuple(entry["shape"]), *entry["data_offsets"])
        for name, entry in header.items()
    }
    return tensors, _HEADER_LENGTH_BYTES + length


class SafetensorsCheckpoint:
    """The weights of the checkpoint directory `directory`; use as a context manager (it removes
    the local copies of remote files on exit)."""

    def __init__(self, directory: str):
        self.directory = directory
        self._local_dir = None
        self._local_files: Dict[str, str] = {}
        self._data_offsets: Dict[str, int] = {}
        index_path, single_path = posixpath.join(directory, INDEX_FILE), posixpath.join(directory, SINGLE_FILE)
        if tf.io.gfile.exists(index_path):
            self.source = index_path
            files = sorted(set(self._weight_map(index_path).values()))
        elif tf.io.gfile.exists(single_path):
            self.source = single_path
            files = [SINGLE_FILE]
        else:
            raise CheckpointError(f"{single_path}: no such file (nor {INDEX_FILE}): the checkpoint has no safetensors weights")
        self.tensors: Dict[str, TensorInfo] = {}
        for file_name in files:
            tensors, data_offset = read_header(self._local_path(file_name), file_name)
            self._data_offsets[file_name] = data_offset
            self.tensors.update(tensors)

    @staticmethod
    def _weight_map(index_path: str) -> Dict[str, str]:
        try:
            with tf.io.gfile.GFile(index_path, "r") as handle:
                weight_map = json.load(handle)["weight_map"]
        except (ValueError, KeyError, TypeError) as error:
            raise CheckpointError(f"{index_path}: no valid weight_map ({error!r})") from None
        return weight_map

    def _local_path(self, file_name: str) -> str:
        """A local path of the checkpoint's `file_name`, copied from a remote directory when needed."""
        path = posixpath.join(self.directory, file_name)
        if _is_local(path):
            if not os.path.exists(_local(path)):
                raise CheckpointError(f"{path}: no such file (listed in {INDEX_FILE})")
            return _local(path)
        if file_name not in self._local_files:
            if not tf.io.gfile.exists(path):
                raise CheckpointError(f"{path}: no such file (listed in {INDEX_FILE})")
            self._local_dir = self._local_dir or tempfile.mkdtemp(prefix="hf-checkpoint-")
            local = os.path.join(self._local_dir, file_name.replace("/", "_"))
            tf.io.gfile.copy(path, local, overwrite=True)
            self._local_files[file_name] = local
        return self._local_files[file_name]

    def names(self) -> List[str]:
        return sorted(self.tensors)

    def file_of(self, name: str) -> str:
        """The path of the file holding tensor `name` (for messages)."""
        return posixpath.join(self.directory, self.tensors[name].file)

    def read(self, name: str) -> np.ndarray:
        """Tensor `name` as a float32 array."""
        info = self.tensors[name]
        path = self._local_path(info.file)
        if info.dtype == "BF16":
            count = int(np.prod(info.shape, dtype=np.int64))
            with open(path, "rb") as handle:
                handle.seek(self._data_offsets[info.file] + info.begin)
                halves = np.fromfile(handle, dtype="<u2", count=count)
            return (halves.astype(np.uint32) << 16).view(np.float32).reshape(info.shape)
        if info.dtype not in _NUMPY_DTYPES:
            raise CheckpointError(f"{self.file_of(name)}: tensor {name} has dtype {info.dtype} (supported: F32, F16, BF16)")
        with safe_open(path, framework="np") as handle:
            return handle.get_tensor(name).astype(np.float32, copy=False)

    def close(self) -> None:
        if self._local_dir:
            shutil.rmtree(self._local_dir, ignore_errors=True)
            self._local_dir = None
            self._local_files.clear()

    def __enter__(self) -> "SafetensorsCheckpoint":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
