"""The longer coverage-guided fuzz run (`make fuzz`): atheris over the decoders the broker uses.

    .venv/bin/python -m tests.fuzz.run [--target all|request|batch|offsets|recovery]
                                       [--time SECONDS] [--corpus DIR] [--artifacts DIR]
                                       [-- extra libFuzzer flags]

Targets (tests/fuzz/fuzz_targets.py holds the properties; the Hypothesis tests beside this file
check the same ones in bounded form):
* request: frames through peek_ids / parse_header / decode_body, raw or pinned to one served
  (api_key, version): a request or DecodeError, never another exception or a dead process.
* batch: validate_batches, iter_batches, parse_header, decode_records, record_timestamps and the
  offsets-log walkers (scan_key_values, scan_columns, iter_log_records), on the raw bytes and on
  the same bytes framed as one batch with a valid CRC (so mutations reach the record parsers).
* offsets: the `__consumer_offsets` key/value decoders and the subscription parser.
* recovery: valid batches written as a segment, then truncated / bit-flipped / extended as the
  input says; PartitionLog.open must keep exactly the intact prefix and be idempotent.
With `all` (the default) the first input byte picks the target. The run stops after --time
seconds (default 300; or pass -max_total_time=N yourself) or at the first failure, whose input
libFuzzer saves under --artifacts. Without atheris (e.g. a Python it has no wheel for) the same
targets run under Hypothesis with a large example budget for the same time.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
TARGETS = ["request", "batch", "offsets", "recovery"]


def _import_targets(instrument: bool):  # type: ignore[no-untyped-def]
    """Import the code under test (instrumented for coverage when atheris runs) and the targets."""
    sys.path.insert(0, str(HERE))
    if instrument:
        import atheris

        with atheris.instrument_imports(include=["offsetd"]):
            import offsetd.protocol.codec  # noqa: F401
            import offsetd.protocol.header  # noqa: F401
            import offsetd.records.batch  # noqa: F401
            import offsetd.records.consumer_protocol  # noqa: F401
            import offsetd.records.log_walker  # noqa: F401
            import offsetd.records.offsets  # noqa: F401
            import offsetd.records.scan  # noqa: F401  (compiled: not instrumentable, still checked)
            import offsetd.records.varint  # noqa: F401
            import offsetd.storage.log_loader  # noqa: F401
            import offsetd.storage.partition_log  # noqa: F401
            import offsetd.storage.segment  # noqa: F401
    import fuzz_targets

    return fuzz_targets


# ------------------------------------------------------------------------------- one input


def make_runner(ft) -> dict[str, Callable[[bytes], None]]:  # type: ignore[no-untyped-def]
    """target name -> function of one input that raises on a property violation."""

    def request(data: bytes) -> None:
        if not data:
            return
        mode, rest = data[0], data[1:]
        if mode & 1 or not rest:
            ft.check_request(rest)
        else:  # pinned: the next byte picks a served schema, the rest is its body
            key, version = ft.PAIRS[rest[0] % len(ft.PAIRS)]
            ft.check_request_body(key, version, rest[1:])
            ft.decode_request(ft.request_frame(key, version, rest[1:]), key, version)

    def batch(data: bytes) -> None:
        ft.check_batches(data)
        ft.check_one_batch_records(data)
        ft.check_offsets_log_scan(data)
        if len(data) >= ft.BATCH_HEADER_SIZE:
            framed = bytearray(data)
            framed[8:12] = (len(framed) - 12).to_bytes(4, "big")
            framed[16] = 2
            framed = ft.fix_crc(framed)
            ft.check_batches(framed)
            ft.check_one_batch_records(framed)
            ft.check_offsets_log_scan(framed)

    def offsets(data: bytes) -> None:
        ft.check_offsets_codecs(data)

    def recovery(data: bytes) -> None:
        # bytes: batch count, record counts, then damage ops: (op, position, value) triples
        if len(data) < 2:
            return
        n = 1 + data[0] % 6
        sizes = [1 + b % 6 for b in data[1 : 1 + n]] or [1]
        batches = ft.make_segment_batches(sizes)
        blob = bytearray(b"".join(batches))
        ops = data[1 + n :]
        for i in range(0, len(ops) - 2, 3):
            op, at, value = ops[i], int.from_bytes(ops[i + 1 : i + 3], "big"), ops[i + 2]
            if op % 4 == 0 and blob:  # flip one bit
                blob[at % len(blob)] ^= 1 << (value % 8)
            elif op % 4 == 1:  # truncate
                del blob[at % (len(blob) + 1):]
            elif op % 4 == 2 and blob:  # overwrite one byte
                blob[at % len(blob)] = value
            else:  # append garbage (the rest of the ops)
                blob += ops[i + 3 :]
                break
        root = Path(ft.scratch_dir())
        try:
            ft.check_recovery(root, batches, bytes(blob))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    return {"request": request, "batch": batch, "offsets": offsets, "recovery": recovery}


def seeds(ft) -> dict[str, list[bytes]]:  # type: ignore[no-untyped-def]
    """Valid inputs per target (without the selector byte) to start mutating from."""
    from offsetd.records.consumer_protocol import encode_consumer_subscription
    from offsetd.records.group_metadata_value import GroupMetadataValue, MemberMetadata
    from offsetd.records.offset_commit_value import OffsetCommitValue
    from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, encode_key, encode_value

    request = []
    for index, (key, version) in enumerate(ft.PAIRS):
        for k, v, frame, _req in ft.sample_frames()[2 * index : 2 * index + 2]:
            assert (k, v) == (key, version)
            request.append(b"\x01" + frame)
            body = frame[len(ft.request_frame(key, version, b"")):]
            request.append(b"\x00" + bytes([index]) + body)
    batch = [
        ft.build_batch(ft.sample_records(n, seed=n), base_offset=n * 10) for n in (1, 3, 7)
    ] + [oc_batch for oc_batch in _offsets_batches(ft)]
    offsets = [
        encode_key(OffsetCommitKey("group", "topic", 3)),
        encode_key(GroupMetadataKey("group")),
        *(encode_value(OffsetCommitValue(42, 1, "m", 1000, 2000), v) for v in range(5)),
        *(encode_value(GroupMetadataValue("consumer", 1, "range", "m", 5, (
            MemberMetadata("m", "i", "c", "/h", 300, 100, b"\x00\x01", b"\x02"),)), v) for v in range(5)),
        encode_consumer_subscription(["a", "b"], b"u"),
    ]
    recovery = [bytes([3, 1, 2, 3]), bytes([2, 4, 4, 1, 0, 90, 0]), bytes([4, 1, 1, 1, 1, 0, 1, 7, 3])]
    return {"request": request, "batch": batch, "offsets": offsets, "recovery": recovery}


def _offsets_batches(ft) -> list[bytes]:  # type: ignore[no-untyped-def]
    """A batch of offsets-log records (what scan_key_values walks at start-up)."""
    from offsetd.records.offset_commit_value import OffsetCommitValue
    from offsetd.records.offsets import OffsetCommitKey, encode_key, encode_value

    key = encode_key(OffsetCommitKey("g", "t", 0))
    value = encode_value(OffsetCommitValue(5, -1, "", 1000, -1))
    return [ft.build_batch([(key, value, 1000, []), (key, None, 1001, [])])]


# ------------------------------------------------------------------------------- runners


def run_atheris(targets: list[str], seconds: int, corpus: Path, artifacts: Path, extra: list[str]) -> int:
    """libFuzzer over the chosen targets; it exits the process (0: time ran out with no failure)."""
    import atheris

    ft = _import_targets(instrument=True)
    runners = make_runner(ft)
    chosen = [runners[t] for t in targets]

    if len(chosen) == 1:
        only = chosen[0]

        def one_input(data: bytes) -> None:
            only(data)
    else:

        def one_input(data: bytes) -> None:
            if data:
                chosen[data[0] % len(chosen)](data[1:])

    corpus.mkdir(parents=True, exist_ok=True)
    all_seeds = seeds(ft)
    for ti, name in enumerate(targets):
        for si, seed in enumerate(all_seeds[name]):
            prefix = b"" if len(targets) == 1 else bytes([ti])
            (corpus / f"seed-{name}-{si}").write_bytes(prefix + seed)
    artifacts.mkdir(parents=True, exist_ok=True)
    argv = [sys.argv[0], f"-max_total_time={seconds}", "-timeout=30", "-rss_limit_mb=4096",
            "-print_final_stats=1", f"-artifact_prefix={artifacts}/", *extra, str(corpus)]
    print(f"fuzz: atheris {version('atheris')} on {', '.join(targets)} for {seconds} s; "
          f"corpus {corpus}, failures saved under {artifacts}/", flush=True)
    atheris.Setup(argv, one_input)
    atheris.Fuzz()  # libFuzzer exits the process itself when it stops
    return 0


def run_hypothesis(targets: list[str], seconds: int) -> int:
    """The fallback: the same targets under Hypothesis, in rounds of many examples until the time
    is up; mutations of the seeds and plain random bytes."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    ft = _import_targets(instrument=False)
    from fuzz_strategies import mutations

    runners = make_runner(ft)
    all_seeds = seeds(ft)
    deadline = time.monotonic() + seconds
    rounds = 0
    print(f"fuzz: Hypothesis on {', '.join(targets)} for {seconds} s", flush=True)
    while time.monotonic() < deadline:
        for name in targets:
            seed_list = all_seeds[name]

            @settings(max_examples=2000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(st.one_of(st.binary(max_size=256), st.sampled_from(seed_list).flatmap(mutations)))
            def prop(data: bytes) -> None:
                if time.monotonic() < deadline:
                    runners[name](data)

            prop()
        rounds += 1
    print(f"fuzz: {rounds} round(s) of Hypothesis examples, no failure", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the options and run atheris (or the Hypothesis fallback)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=["all", *TARGETS], default="all")
    parser.add_argument("--time", type=int, default=300, help="seconds to run (default 300)")
    parser.add_argument("--corpus", type=Path, default=None,
                        help="corpus directory, grown run after run (default: offsetd-fuzz-corpus-TARGET in the temp dir)")
    parser.add_argument("--artifacts", type=Path, default=Path(tempfile.gettempdir()) / "offsetd-fuzz-artifacts",
                        help="where libFuzzer saves a failing input")
    parser.add_argument("--hypothesis", action="store_true", help="use the Hypothesis runner even with atheris")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    for flag in extra:
        if flag.startswith("-max_total_time="):
            args.time = int(flag.split("=", 1)[1])
    extra = [a for a in extra if not a.startswith("-max_total_time=")]
    targets = TARGETS if args.target == "all" else [args.target]
    logging.disable(logging.CRITICAL)  # recovery logs every truncation it makes: noise here
    if not args.hypothesis:
        try:
            import atheris  # noqa: F401
        except ImportError as exc:
            print(f"fuzz: atheris is not available ({exc}); falling back to Hypothesis", flush=True)
        else:
            corpus = args.corpus or Path(tempfile.gettempdir()) / f"offsetd-fuzz-corpus-{args.target}"
            return run_atheris(targets, args.time, corpus.resolve(), args.artifacts.resolve(), extra)
    return run_hypothesis(targets, args.time)


if __name__ == "__main__":
    sys.exit(main())
