"""The parameter-server wire format and the gRPC method names, with timestamping codec hooks.

Messages travel as gRPC unary calls whose payload is this module's own binary framing, not
protobuf: a fixed header followed by raw little-endian arrays, so that an embedding block of
``n x dim`` float32 values is one ``memcpy`` each way (``numpy.frombuffer`` on receipt), the way
production parameter servers ship tensors (ps-lite's ``SArray`` zero-copy buffers; TensorFlow's
``TensorProto.tensor_content`` raw bytes). The codec functions are given to gRPC as the request/
response (de)serializers, which is where the RPC log's send/receive timestamps are taken
(docs/pstrain.md, "Timestamps").

Framing (all little-endian)::

    header   magic b"DDPS" | version u8 | op u8 | table_id i16 | rpc_id i64 | worker_id i64
             | iteration i64 | n_arrays u32                                  (36 bytes)
    array    dtype u8 | ndim u8 | pad to 8 | ndim x i64 shape | data, padded to 8 bytes

Arrays per message (``op`` is the index in :data:`ddlscope.rpc.schema.OPS`):

=============  ===============================================  ===============================
op             request arrays                                   response arrays
=============  ===============================================  ===============================
pull_sparse    keys int64 (n,)                                  rows float32 (n, dim)
pull_dense     tensor ids int64 (k,)                            k tensors float32, any shape
push_sparse    keys int64 (n,), gradients float32 (n, dim)      none (acknowledgement)
push_dense     tensor ids int64 (k,), k gradients float32       none (acknowledgement)
=============  ===============================================  ===============================
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import numpy as np

from ddlscope.rpc.schema import OPS

SERVICE = "ddlscope.ps.ParameterServer"
"""The gRPC service name (``package.Service`` in gRPC's naming)."""
METHOD_NAMES: tuple[str, ...] = ("PullSparse", "PullDense", "PushSparse", "PushDense")
"""gRPC method names, index-aligned with :data:`~ddlscope.rpc.schema.OPS`."""
METHOD_PATHS: tuple[str, ...] = tuple(f"/{SERVICE}/{m}" for m in METHOD_NAMES)
"""Full gRPC method paths (``/package.Service/Method``), index-aligned with OPS."""
OP_OF_PATH: dict[str, int] = {p: i for i, p in enumerate(METHOD_PATHS)}
RPC_ID_METADATA_KEY = "ddlscope-rpc-id"
"""gRPC metadata key carrying the RPC id from worker to server (also in the payload header)."""

PULL_SPARSE, PULL_DENSE, PUSH_SPARSE, PUSH_DENSE = range(4)
assert OPS == ("pull_sparse", "pull_dense", "push_sparse", "push_dense")

MAGIC = b"DDPS"
VERSION = 1
_HEADER = struct.Struct("<4sBBhqqqI")
_ARRAY = struct.Struct("<BB6x")
_DTYPES: tuple[np.dtype, ...] = (np.dtype("<f4"), np.dtype("<i8"))
_CODE_OF = {dt: i for i, dt in enumerate(_DTYPES)}


class WireError(ValueError):
    """A payload that does not follow the framing (bad magic, version, dtype or length)."""


@dataclass(slots=True)
class Message:
    """One request or response.

    Attributes:
        op: index into :data:`~ddlscope.rpc.schema.OPS`.
        rpc_id: the RPC id (unique within a run), echoed in the response.
        worker_id: the worker that issued the RPC.
        iteration: the worker's training iteration.
        table_id: embedding table of a sparse op; -1 for dense ops.
        arrays: the payload arrays (float32 or int64), see the module docstring.
        nbytes: serialized size in bytes (set by :func:`encode` / :func:`decode`).
        codec_start_ns, codec_end_ns: ``time.time_ns()`` at entry and exit of the (de)serializer
            that produced or consumed this message (set by :func:`encode` / :func:`decode`).
    """

    op: int
    rpc_id: int
    worker_id: int
    iteration: int
    table_id: int
    arrays: tuple[np.ndarray, ...]
    nbytes: int = 0
    codec_start_ns: int = 0
    codec_end_ns: int = 0


def encode(msg: Message) -> bytes:
    """Serialize ``msg``; records ``codec_start_ns``/``codec_end_ns`` and ``nbytes`` on it.

    Raises:
        WireError: an array whose dtype is not float32/int64 (after native-to-little-endian).
    """
    start = time.time_ns()
    parts: list[bytes | memoryview] = [
        _HEADER.pack(MAGIC, VERSION, msg.op, msg.table_id, msg.rpc_id, msg.worker_id, msg.iteration,
                     len(msg.arrays))
    ]
    for arr in msg.arrays:
        code = _CODE_OF.get(arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype)
        if code is None:
            raise WireError(f"array dtype {arr.dtype}: expected float32 or int64")
        a = np.ascontiguousarray(arr, dtype=_DTYPES[code])
        parts.append(_ARRAY.pack(code, a.ndim))
        parts.append(struct.pack(f"<{a.ndim}q", *a.shape))
        data = memoryview(a.reshape(-1).view(np.uint8))
        parts.append(data)
        if pad := -len(data) % 8:
            parts.append(b"\0" * pad)
    payload = b"".join(parts)
    msg.nbytes = len(payload)
    msg.codec_start_ns = start
    msg.codec_end_ns = time.time_ns()
    return payload


def decode(payload: bytes) -> Message:
    """Parse a payload into a :class:`Message` whose arrays are zero-copy read-only views.

    Records ``codec_start_ns`` (entry: the whole message is in this process) and
    ``codec_end_ns`` (exit) and ``nbytes``.

    Raises:
        WireError: bad magic or version, unknown dtype, or a payload shorter than its framing says.
    """
    start = time.time_ns()
    view = memoryview(payload)
    if len(view) < _HEADER.size:
        raise WireError(f"payload of {len(view)} bytes is shorter than the {_HEADER.size}-byte header")
    magic, version, op, table_id, rpc_id, worker_id, iteration, n_arrays = _HEADER.unpack_from(view, 0)
    if magic != MAGIC or version != VERSION:
        raise WireError(f"payload header {magic!r} v{version}: expected {MAGIC!r} v{VERSION}")
    if op >= len(OPS):
        raise WireError(f"payload op {op}: expected 0..{len(OPS) - 1}")
    offset = _HEADER.size
    arrays = []
    for i in range(n_arrays):
        if offset + _ARRAY.size > len(view):
            raise WireError(f"array {i}: payload truncated at byte {offset}")
        code, ndim = _ARRAY.unpack_from(view, offset)
        offset += _ARRAY.size
        if code >= len(_DTYPES):
            raise WireError(f"array {i}: dtype code {code}: expected 0 (float32) or 1 (int64)")
        shape = struct.unpack_from(f"<{ndim}q", view, offset)
        offset += 8 * ndim
        dtype = _DTYPES[code]
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset + size > len(view):
            raise WireError(f"array {i}: {size} data bytes at byte {offset} exceed the {len(view)}-byte payload")
        arrays.append(np.frombuffer(view, dtype=dtype, count=size // dtype.itemsize, offset=offset).reshape(shape))
        offset += size + (-size % 8)
    return Message(op, rpc_id, worker_id, iteration, table_id, tuple(arrays), nbytes=len(view),
                   codec_start_ns=start, codec_end_ns=time.time_ns())
