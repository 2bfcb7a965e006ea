"""The tensors of a Hugging Face checkpoint's safetensors files: their headers, checked, and each
tensor read alone as float32 (or bfloat16) numpy.

A checkpoint has either one `model.safetensors` or shards listed in `model.safetensors.index.json`
(`weight_map`: tensor name -> shard file). Each file's header (a little-endian u64 length, then
JSON: name -> dtype, shape, byte offsets into the data section that follows) is read once, through
tf.io.gfile and without reading any tensor, so names, shapes and the file's integrity are known
before any weight is: a file shorter than its header says (an interrupted copy or download), or an
entry whose byte range does not hold its shape, is a `CheckpointError` naming the file. A tensor is
then read alone and its file unmapped again, so importing never holds the checkpoint twice (only
the backbone's variables and the tensor being copied into them).

float32/float16 tensors are read with safetensors' numpy API (`safe_open(..., framework="np")`);
numpy has no bfloat16 of its own, so a BF16 tensor's bytes are read at its offsets and either
widened to float32 (a bfloat16 is the upper half of a float32's bits) or kept as TensorFlow's
bfloat16 numpy type when the variable it goes into is bfloat16 (frozen LoRA base weights,
model/backbone.py).

Reading a tensor needs a local file: safetensors opens local paths only, so a file on another
filesystem (gs://, s3:// where registered) is copied to a local temporary directory on its first
read (removed on `close`); the headers alone never copy anything.
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
SUPPORTED_DTYPES = ("F32", "F16", "BF16", "F64")  # the dtypes `read` reads (anything else is refused by name)
# Bytes per element of every dtype safetensors defines (to check each entry's byte range).
_ITEM_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
_HEADER_LENGTH_BYTES = 8
_MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit
BFLOAT16 = tf.bfloat16.as_numpy_dtype


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
    return path[len("file://") :] if path.startswith("file://") else path


def _truncated(path: str, needed: int, size: int, what: str) -> CheckpointError:
    return CheckpointError(
        f"{path}: truncated: the file has {size:,} bytes, but {what} ends at byte {needed:,} "
        "(an interrupted copy or download? fetch the file again)"
    )


def _entry(path: str, file_name: str, name: str, entry) -> TensorInfo:
    """One header entry, checked: a known dtype and a byte range that holds exactly its shape."""
    try:
        dtype, shape, (begin, end) = entry["dtype"], tuple(int(size) for size in entry["shape"]), entry["data_offsets"]
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: not a safetensors file (header entry {name}: {error!r})") from None
    if dtype not in _ITEM_BYTES:
        raise CheckpointError(f"{path}: tensor {name} has unknown dtype {dtype}")
    expected = _ITEM_BYTES[dtype] * int(np.prod(shape, dtype=np.int64))
    if not 0 <= begin <= end or end - begin != expected:
        raise CheckpointError(
            f"{path}: tensor {name} ({dtype} {list(shape)}) has {end - begin} bytes at offsets "
            f"[{begin}, {end}], expected {expected}: a damaged file"
        )
    return TensorInfo(file_name, dtype, shape, int(begin), int(end))


def read_header(path: str, file_name: str) -> Tuple[Dict[str, TensorInfo], int]:
    """(name -> TensorInfo, offset of the data section) of the safetensors file at `path` (any
    tf.io.gfile path), read and checked without reading a tensor (see the module docstring)."""
    size = tf.io.gfile.stat(path).length
    with tf.io.gfile.GFile(path, "rb") as handle:
        prefix = handle.read(_HEADER_LENGTH_BYTES)
        if len(prefix) < _HEADER_LENGTH_BYTES:
            raise _truncated(path, _HEADER_LENGTH_BYTES, size, "the header's length field")
        (length,) = struct.unpack("<Q", prefix)
        if length > _MAX_HEADER_BYTES:
            raise CheckpointError(f"{path}: not a safetensors file (header length {length:,} bytes)")
        if _HEADER_LENGTH_BYTES + length > size:
            raise _truncated(path, _HEADER_LENGTH_BYTES + length, size, "its header")
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{path}: not a safetensors file ({error})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    tensors = {name: _entry(path, file_name, name, entry) for name, entry in header.items()}
    data_offset = _HEADER_LENGTH_BYTES + length
    needed = data_offset + max((info.end for info in tensors.values()), default=0)
    if needed > size:
        raise _truncated(path, needed, size, f"the data of the {len(tensors)} tensors its header lists")
    return tensors, data_offset


class SafetensorsCheckpoint:
    """The weights of the checkpoint directory `directory`; use as a context manager (it removes
    the local copies of remote files on exit). Opening it reads and checks every file's header."""

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
            raise CheckpointError(
                f"{single_path}: no such file (nor {INDEX_FILE}): the checkpoint has no safetensors weights"
            )
        self.tensors: Dict[str, TensorInfo] = {}
        for file_name in files:
            path = posixpath.join(directory, file_name)
            if not tf.io.gfile.exists(path):
                raise CheckpointError(f"{path}: no such file (listed in {INDEX_FILE})")
            tensors, data_offset = read_header(path, file_name)
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
            return _local(path)
        if file_name not in self._local_files:
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

    def read(self, name: str, dtype=np.float32) -> np.ndarray:
        """Tensor `name` as an array of numpy `dtype` (np.float32 by default; `BFLOAT16` keeps a BF16
        tensor's bits as stored; any other conversion rounds to nearest, as a TensorFlow cast does)."""
        info = self.tensors[name]
        path = self._local_path(info.file)
        if info.dtype == "BF16":
            count = int(np.prod(info.shape, dtype=np.int64))
            with open(path, "rb") as handle:
                handle.seek(self._data_offsets[info.file] + info.begin)
                halves = np.fromfile(handle, dtype="<u2", count=count).reshape(info.shape)
            if dtype == BFLOAT16:
                return halves.view(BFLOAT16)
            return (halves.astype(np.uint32) << 16).view(np.float32).astype(dtype, copy=False)
        if info.dtype not in _NUMPY_DTYPES:
            raise CheckpointError(
                f"{self.file_of(name)}: tensor {name} has dtype {info.dtype} (supported: {', '.join(SUPPORTED_DTYPES)})"
            )
        with safe_open(path, framework="np") as handle:
            return handle.get_tensor(name).astype(dtype, copy=False)

    def close(self) -> None:
        if self._local_dir:
            shutil.rmtree(self._local_dir, ignore_errors=True)
            self._local_dir = None
            self._local_files.clear()

    def __enter__(self) -> "SafetensorsCheckpoint":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
