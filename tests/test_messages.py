import numpy as np
import pytest

import lwmq


def test_frames_from_any_buffer_protocol_object():
    arr = np.arange(4, dtype=np.int32)
    m = lwmq.Message(b"head", bytearray(b"ba"), memoryview(b"mv"), arr)
    assert len(m) == 4
    assert [bytes(f) for f in m.frames[:3]] == [b"head", b"ba", b"mv"]
    assert np.array_equal(np.frombuffer(m[3], dtype=np.int32), arr)
    assert m.nbytes == 4 + 2 + 2 + arr.nbytes
    assert m[-1].tobytes() == arr.tobytes()
    assert [len(f) for f in m] == [4, 2, 2, 16]


def test_message_is_a_copy_made_independently_of_channels():
    data = bytearray(b"abc")
    m = lwmq.Message(data)
    data[0] = ord("X")
    assert bytes(m[0]) == b"abc"


def test_frames_are_read_only():
    m = lwmq.Message(b"abc")
    view = memoryview(m[0])
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1
    with pytest.raises(ValueError):
        np.frombuffer(m[0], dtype=np.uint8).setflags(write=True)


def test_bad_frames_are_refused_with_a_type_error():
    with pytest.raises(TypeError, match="not str"):
        lwmq.Message("text")
    with pytest.raises(TypeError, match="contiguous"):
        lwmq.Message(np.arange(10)[::2])
    with pytest.raises(ValueError, match="at least one frame"):
        lwmq.Message()
    with pytest.raises(IndexError):
        lwmq.Message(b"x")[1]


def test_equality_and_repr():
    assert lwmq.Message(b"a", b"b") == lwmq.Message(b"a", b"b")
    assert lwmq.Message(b"a") != lwmq.Message(b"b")
    assert lwmq.Frame(b"abc") == b"abc"
    assert "2 frames" in repr(lwmq.Message(b"a", b"b"))
