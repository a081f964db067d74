"""Fuzzing the request decoders (protocol/header.py, protocol/codec.py) for every served
(api_key, version): valid requests round-trip, strict prefixes of them are rejected, and any other
bytes give a request or DecodeError, never another exception, a hang or a dead process."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_strategies import bit_flips, entities, mutations
from fuzz_targets import (
    PAIRS,
    check_request,
    check_request_body,
    decode_request,
    encode_entity,
    no_hang,
    request_frame,
    sample_frames,
)
from offsetd.protocol import codec
from offsetd.protocol.codec import request_class
from offsetd.protocol.primitives import DecodeError
from offsetd.protocol.header import parse_header, peek_ids

SAMPLES = sample_frames()
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def valid_requests(draw: st.DrawFn) -> tuple[int, int, bytes, object]:
    """(api_key, version, frame, request) of a random served schema and request."""
    key, version = draw(st.sampled_from(PAIRS))
    cls = request_class(key, version)
    request = draw(entities(cls))
    client_id = draw(st.none() | st.text(max_size=6))
    frame = request_frame(key, version, encode_entity(cls, request), draw(st.integers(-(2**31), 2**31 - 1)), client_id)
    return key, version, frame, request


def test_every_served_schema_round_trips_and_rejects_every_prefix() -> None:
    """Every served schema: samples round-trip, no strict prefix decodes, bit flips raise only DecodeError."""
    assert len(SAMPLES) == 2 * len(PAIRS) and len(PAIRS) > 100
    with no_hang():
        for key, version, frame, request in SAMPLES:
            decoded = decode_request(frame)
            assert decoded is not None, (key, version)
            header, body = decoded
            assert (header.api_key, header.api_version, header.client_id) == (key, version, "fuzz")
            assert body == request, (key, version)
            for n in range(len(frame)):
                assert decode_request(frame[:n]) is None, f"api {key} v{version}: {n}-byte prefix accepted"
            for bit in range(len(frame) * 8):
                flipped = bytearray(frame)
                flipped[bit // 8] ^= 1 << (bit % 8)
                check_request(bytes(flipped))


def test_unknown_tagged_fields_are_skipped_and_their_truncations_rejected() -> None:
    """Unknown tagged fields are skipped (KIP-482) and no strict prefix of such a frame decodes."""
    flexible = 0
    with no_hang():
        for key, version, frame, request in SAMPLES[::2]:  # the defaults-only requests
            if not request_class(key, version).__flexible__:
                continue
            flexible += 1
            assert frame[-1] == 0, "a defaults-only flexible body ends with an empty tag section"
            tagged = frame[:-1] + b"\x01" + b"\x63" + b"\x03abc"  # one field: tag 99, 3 bytes
            decoded = decode_request(tagged)
            assert decoded is not None and decoded[1] == request, (key, version)
            for n in range(len(tagged)):
                assert decode_request(tagged[:n]) is None, f"api {key} v{version}: {n}-byte prefix accepted"
    assert flexible > 50


@FAST
@given(valid_requests(), st.data())
def test_generated_requests_round_trip_and_truncations_are_rejected(
    sample: tuple[int, int, bytes, object], data: st.DataObject
) -> None:
    """Any valid request of any served schema decodes to itself; a strict prefix never decodes."""
    key, version, frame, request = sample
    with no_hang():
        decoded = decode_request(frame)
        assert decoded is not None and decoded[1] == request
        cut = data.draw(st.integers(0, len(frame) - 1))
        assert decode_request(frame[:cut]) is None, f"api {key} v{version}: {cut}-byte prefix accepted"


@FAST
@given(valid_requests(), st.data())
def test_mutated_requests_decode_or_raise_decode_error(
    sample: tuple[int, int, bytes, object], data: st.DataObject
) -> None:
    """Mutated valid requests give a request or DecodeError, with their own ids or the original schema."""
    key, version, frame, _request = sample
    mutated = data.draw(mutations(frame))
    with no_hang():
        check_request(mutated)
        decode_request(mutated, key, version)


@settings(max_examples=200, deadline=None)
@given(valid_requests(), st.data())
def test_bit_flipped_bodies_decode_or_raise_decode_error(
    sample: tuple[int, int, bytes, object], data: st.DataObject
) -> None:
    """Up to three flipped bits anywhere in a valid frame: a request or DecodeError only."""
    _key, _version, frame, _request = sample
    with no_hang():
        assert check_request(data.draw(bit_flips(frame))) in ("decoded", "rejected")


@FAST
@given(st.sampled_from(PAIRS), st.binary(max_size=96))
def test_random_bodies_decode_or_raise_decode_error(pair: tuple[int, int], body: bytes) -> None:
    """Random body bytes behind a valid header of any served schema: a request or DecodeError."""
    with no_hang():
        assert check_request_body(pair[0], pair[1], body) in ("decoded", "rejected")


@FAST
@given(st.binary(max_size=64))
def test_random_frames_decode_or_raise_decode_error(frame: bytes) -> None:
    """Random frames: peek_ids, parse_header and decode_body give a result or DecodeError."""
    with no_hang():
        assert check_request(frame) in ("decoded", "rejected")


@FAST
@given(st.binary(max_size=40), st.booleans())
def test_header_parsers_return_consistent_fields_or_decode_error(frame: bytes, flexible: bool) -> None:
    """peek_ids / parse_header: consistent ids and a body offset inside the frame, or DecodeError."""
    view = memoryview(frame)
    try:
        ids = peek_ids(view)
    except DecodeError:
        assert len(frame) < 8
        ids = None
    else:
        assert ids == struct.unpack_from(">hhi", frame, 0)
    try:
        header = parse_header(view, flexible)
    except DecodeError:
        return
    assert ids is not None and (header.api_key, header.api_version, header.correlation_id) == ids
    assert 10 <= header.body_offset <= len(frame)
    if header.client_id is not None:
        assert len(header.client_id.encode()) == struct.unpack_from(">h", frame, 8)[0]


# Found by test_bit_flipped_bodies_decode_or_raise_decode_error: kio's native reader sizes an
# array from its wire count before reading any element, so a count far beyond the frame made it
# allocate count * 8 bytes, and the Rust allocator aborted the whole process (SIGABRT) when that
# failed: one small frame killed the broker. Run in a child with a 4 GiB address-space limit so
# the legacy int32 counts fail there as they would on a smaller machine.
HUGE_COUNTS = [
    (0, 9, "00" "0001" "000003e8" "ffffffff0f"),  # Produce v9: topic_data compact count 2^32 - 2
    (0, 8, "ffff" "0001" "000003e8" "7fffffff"),  # Produce v8: topic_data int32 count 2^31 - 1
    (3, 4, "7fffffff"),  # Metadata v4: topics int32 count
    (8, 9, "0267" "00000001" "026d" "00" "02" "0274" "ffffffff0f"),  # OffsetCommit v9: partitions
    (1, 12, "ffffffff" "000001f4" "00000001" "7fffffff" "00" "00000000" "ffffffff" "ffffffff0f"),  # Fetch v12
]


def test_huge_array_counts_are_decode_errors_not_a_process_abort() -> None:
    """Array counts far beyond the frame are DecodeError; the decoding process survives them."""
    script = textwrap.dedent(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        from offsetd.protocol.codec import decode_body, request_class
        from offsetd.protocol.primitives import DecodeError
        for key, version, body in %r:
            try:
                decode_body(request_class(key, version), memoryview(bytes.fromhex(body)), 0)
            except DecodeError as exc:
                print(key, version, "DecodeError", exc, flush=True)
            else:
                print(key, version, "decoded", flush=True)
        """
        % (HUGE_COUNTS,)
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == len(HUGE_COUNTS)
    for line, (key, version, _body) in zip(lines, HUGE_COUNTS):
        assert line.startswith(f"{key} {version} DecodeError"), line


@FAST
@given(valid_requests(), st.data())
def test_array_count_guard_refuses_only_what_kio_refuses(sample: tuple[int, int, bytes, object], data: st.DataObject) -> None:
    """The count guard never refuses a body kio's native reader decodes (tried where counts are small)."""
    key, version, frame, _request = sample
    mutated = data.draw(mutations(frame) | bit_flips(frame))
    cls = request_class(key, version)
    view = memoryview(mutated)
    try:
        pos = parse_header(view, cls.__flexible__).body_offset
    except DecodeError:
        return
    guard = codec._array_guard(cls)
    refused = None
    try:
        if guard is not None:
            guard(view, pos)
    except codec._UnknownTag:
        pass
    except DecodeError as exc:  # a count beyond the frame, or a truncated / over-long varint
        found = re.search(r"array count (-?\d+)", str(exc))
        if found and int(found.group(1)) > 1 << 20:
            return  # what the guard is for: kio would try to allocate count * 8 bytes
        refused = exc
    except (IndexError, struct.error) as exc:
        refused = exc
    if refused is None:
        return
    with no_hang():
        try:
            codec._native_reader(cls)(view, pos)
        except Exception:
            return
    raise AssertionError(f"guard refused ({refused!r}) a body kio decodes: api {key} v{version} {mutated.hex()}")
