"""The wire format from Python: golden vectors (shared with the Rust tests) and hostile input."""

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import lwmq
from lwmq import _core

GOLDEN = Path(__file__).parent / "golden" / "wire_v1.tsv"


def _vectors():
    for line in GOLDEN.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, messages, buffer = line.split("\t")
        msgs = [[bytes.fromhex("" if f == "-" else f) for f in m.split(",")] for m in messages.split(";")]
        yield name, msgs, bytes.fromhex(buffer)


def test_golden_vectors():
    vectors = list(_vectors())
    assert len(vectors) >= 4
    for name, msgs, buffer in vectors:
        assert _core.encode_buffer(msgs) == buffer, name
        decoded = _core.decode_buffer(buffer)
        assert [[bytes(f) for f in m] for m in decoded] == msgs, name
    assert _core.WIRE_VERSION == 1


frames = st.lists(st.binary(max_size=64), min_size=1, max_size=4)


@settings(max_examples=500, deadline=None)
@given(st.lists(frames, min_size=1, max_size=8))
def test_round_trip(messages):
    decoded = _core.decode_buffer(_core.encode_buffer(messages))
    assert [[bytes(f) for f in m] for m in decoded] == messages


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_decode_or_raise_protocol_error(data):
    try:
        messages = _core.decode_buffer(data)
    except lwmq.ProtocolError:
        return
    assert sum(m.nbytes for m in messages) <= len(data)


@settings(max_examples=2000, deadline=None)
@given(st.lists(frames, min_size=1, max_size=5), st.data())
def test_mutated_buffers_decode_or_raise_protocol_error(messages, data):
    buf = bytearray(_core.encode_buffer(messages))
    for _ in range(data.draw(st.integers(0, 3))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del buf[data.draw(st.integers(0, len(buf))):]
    try:
        decoded = _core.decode_buffer(bytes(buf))
    except lwmq.ProtocolError:
        return
    assert sum(m.nbytes for m in decoded) <= len(buf)
