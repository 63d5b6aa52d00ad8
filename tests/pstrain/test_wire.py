"""The payload framing: sizes from the layout, round trips, and errors on malformed payloads."""

from __future__ import annotations

import numpy as np
import pytest

from ddlscope.pstrain import wire


def test_roundtrip_sizes_and_timestamps():
    keys = np.array([3, 7, 11], dtype=np.int64)
    grads = np.arange(6, dtype=np.float32).reshape(3, 2)
    msg = wire.Message(wire.PUSH_SPARSE, rpc_id=1_000_000_005, worker_id=1, iteration=42, table_id=1,
                       arrays=(keys, grads))
    payload = wire.encode(msg)
    # header 36 B; keys: 8 B array header + 1 x 8 B shape + 3 x 8 B data = 40 B;
    # grads: 8 + 2 x 8 + 6 x 4 = 48 B  -> 36 + 40 + 48 = 124 B
    assert len(payload) == msg.nbytes == 124
    assert 0 < msg.codec_start_ns <= msg.codec_end_ns
    back = wire.decode(payload)
    assert (back.op, back.rpc_id, back.worker_id, back.iteration, back.table_id) == (2, 1_000_000_005, 1, 42, 1)
    assert back.nbytes == 124
    np.testing.assert_array_equal(back.arrays[0], keys)
    np.testing.assert_array_equal(back.arrays[1], grads)
    assert back.arrays[1].dtype == np.float32


def test_odd_sizes_are_padded_to_8_bytes():
    # 3 float32 = 12 data bytes, padded to 16: 36 + (8 + 8 + 16) = 68
    msg = wire.Message(wire.PULL_DENSE, 1, 0, 0, -1, (np.ones(3, dtype=np.float32),))
    assert len(wire.encode(msg)) == 68
    np.testing.assert_array_equal(wire.decode(wire.encode(msg)).arrays[0], np.ones(3, dtype=np.float32))


def test_empty_arrays_and_no_arrays():
    msg = wire.Message(wire.PUSH_SPARSE, 1, 0, 0, 0, (np.empty(0, np.int64), np.empty((0, 4), np.float32)))
    back = wire.decode(wire.encode(msg))
    assert back.arrays[0].shape == (0,) and back.arrays[1].shape == (0, 4)
    ack = wire.Message(wire.PUSH_DENSE, 1, 0, 0, -1, ())
    assert len(wire.encode(ack)) == 36


def test_malformed_payloads():
    good = wire.encode(wire.Message(0, 1, 0, 0, 0, (np.arange(4, dtype=np.int64),)))
    with pytest.raises(wire.WireError, match="header"):
        wire.decode(b"XXXX" + good[4:])
    with pytest.raises(wire.WireError, match="exceed"):
        wire.decode(good[:-8])
    with pytest.raises(wire.WireError, match="shorter"):
        wire.decode(good[:10])
    with pytest.raises(wire.WireError, match="float32 or int64"):
        wire.encode(wire.Message(0, 1, 0, 0, 0, (np.arange(3, dtype=np.int32),)))
