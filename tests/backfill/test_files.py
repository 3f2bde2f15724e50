"""Framing and compression of file-exporter output."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pytest

from otel_delta.backfill.files import BadRecord, Record, UnreadableFile, records
from otel_delta.backfill.stage import file_sha256, stage_file
from otel_delta.convert import logs_to_arrow, spans_to_arrow
from tests import corpus
from tests.backfill.collector import (
    framed,
    otlp_json,
    truncated_gzip,
    write_json_lines,
    write_proto,
)


def payloads(items) -> list[bytes]:
    return [r.payload for r in items if isinstance(r, Record)]


def test_json_lines_with_offsets_and_line_numbers() -> None:
    data = b'{"a":1}\n\n{"b":2}\n'
    items = list(records(data, "otlp-json"))
    assert [(r.offset, r.line, r.payload) for r in items] == [
        (0, 1, b'{"a":1}'),
        (9, 3, b'{"b":2}'),
    ]


@pytest.mark.parametrize("compress", [None, "gzip", "zstd", "zstd-per-message"])
def test_proto_files_in_every_layout(tmp_path: Path, compress) -> None:
    requests = [corpus.trace_request(), corpus.logs_request()]
    path = write_proto(tmp_path / "f.pb", requests, compress)
    assert payloads(records(path.read_bytes(), "auto")) == [r.SerializeToString() for r in requests]


@pytest.mark.parametrize("compress", [None, "gzip", "zstd-per-message"])
def test_json_files_in_every_layout(tmp_path: Path, compress) -> None:
    requests = [corpus.metrics_request(), corpus.trace_request()]
    path = write_json_lines(tmp_path / "f.json", requests, compress)
    got = payloads(records(path.read_bytes(), "otlp-json"))
    assert got == [otlp_json(r).encode() for r in requests]


def test_truncated_frame_is_a_bad_record_after_the_good_ones() -> None:
    good = corpus.logs_request().SerializeToString()
    data = framed([good]) + (1000).to_bytes(4, "big") + b"short"
    items = list(records(data, "otlp-proto"))
    assert payloads(items) == [good]
    assert isinstance(items[1], BadRecord) and "truncated message" in items[1].reason


@pytest.mark.parametrize(
    "data",
    [
        gzip.compress(b"x" * 100)[:10] + b"\xff" * 10,  # corrupt from its first block
        gzip.compress(b"x" * 100)[:6],  # cut inside its header
    ],
)
def test_gzip_with_nothing_readable_is_unreadable(data: bytes) -> None:
    with pytest.raises(UnreadableFile, match="gzip"):
        list(records(data, "auto"))


def test_gzip_cut_short_keeps_its_whole_lines_as_a_plain_file_cut_short_does() -> None:
    first = otlp_json(corpus.trace_request()).encode()
    second = otlp_json(corpus.logs_request()).encode()
    items = list(records(truncated_gzip(first + b"\n", second + b"\n"), "auto"))
    assert payloads(items) == [first]
    tail = items[1]
    assert isinstance(tail, BadRecord) and (tail.offset, tail.line) == (len(first) + 1, 2)
    assert 0 < len(tail.raw) < len(second) and second.startswith(tail.raw)
    assert "gzip" in tail.reason and "ended before the end-of-stream marker" in tail.reason
    # the same bytes, uncompressed: the same records at the same offsets and lines
    plain = list(records(first + b"\n" + tail.raw, "auto"))
    assert [(r.offset, r.line) for r in plain] == [(r.offset, r.line) for r in items]


def test_gzip_cut_between_lines_says_the_rest_is_missing() -> None:
    first = otlp_json(corpus.trace_request()).encode()
    second = otlp_json(corpus.logs_request()).encode()
    items = list(records(truncated_gzip(first + b"\n", second + b"\n", cut=0.0), "auto"))
    assert payloads(items) == [first]
    assert isinstance(items[1], BadRecord) and "gzip" in items[1].reason
    assert (items[1].offset, items[1].line, items[1].raw) == (len(first) + 1, 2, b"")


def test_gzip_cut_short_keeps_its_whole_frames() -> None:
    good, cut = (
        corpus.trace_request().SerializeToString(),
        corpus.logs_request().SerializeToString(),
    )
    items = list(records(truncated_gzip(framed([good]), framed([cut])), "otlp-proto"))
    assert payloads(items) == [good]
    tail = items[1]
    assert isinstance(tail, BadRecord) and tail.offset == len(framed([good]))
    assert "gzip" in tail.reason and "truncated message" in tail.reason


def test_stage_file_counts_and_dead_letters(tmp_path: Path) -> None:
    path = tmp_path / "mixed.json"
    lines = [otlp_json(corpus.trace_request()), "{broken", otlp_json(corpus.logs_request())]
    path.write_text("\n".join(lines) + "\n")
    staged = stage_file(str(path), file_sha256(str(path)), "auto")
    assert staged.records == 3 and set(staged.tables) == {"spans", "logs"}
    expected = [spans_to_arrow(corpus.trace_request()), logs_to_arrow(corpus.logs_request())]
    assert staged.rejected == sum(c.rejected.count for c in expected)
    assert staged.rows == sum(c.rows for c in expected) > 0
    dead = staged.dead_letters().to_pylist()
    assert [(d["line"], d["raw"]) for d in dead] == [(2, b"{broken")]
    assert "invalid JSON" in dead[0]["reason"]
    assert pa.types.is_timestamp(staged.dead_letters().schema.field("loaded_at").type)


def test_staged_rows_pass_the_receiver_s_admission_rules(tmp_path: Path) -> None:
    """As the stream's (found by its review): a `service.name` too long for a directory name
    failed the load at every run; a time at or after 2^63 ns was filed before 1970."""
    request = corpus.trace_request()
    spans = request.resource_spans[0].scope_spans[0].spans
    long_name = "svc-" + "x" * 400
    for kv in request.resource_spans[0].resource.attributes:
        if kv.key == "service.name":
            kv.value.string_value = long_name
    spans[0].start_time_unix_nano = 2**63 + 5
    path = tmp_path / "long.json"
    path.write_text(otlp_json(request) + "\n")
    expected = spans_to_arrow(request)
    staged = stage_file(str(path), file_sha256(str(path)), "auto", ("service_name", "date"))
    assert staged.rejected == expected.rejected.count + 1
    names = set(staged.table("spans").column("service_name").to_pylist())
    assert long_name not in names
    assert any(n.startswith("svc-xxx") and "~" in n for n in names)
    assert staged.table("spans").num_rows == expected.tables["spans"].num_rows - 1


def test_unreadable_file_is_one_dead_letter(tmp_path: Path) -> None:
    staged = stage_file(str(tmp_path / "gone.json"), "sha", "auto")
    assert staged.records == 0 and "unreadable file" in staged.dead[0]["reason"]


def test_a_json_line_that_is_not_an_object_says_so(tmp_path: Path) -> None:
    """Lines of an OTLP/JSON file are JSON whatever they start with: `null`, `[]` or a string
    were read as protobuf and dead-lettered as "not an OTLP protobuf Export request"."""
    path = tmp_path / "traces.json"
    path.write_text(otlp_json(corpus.trace_request()) + '\nnull\n[]\n"text"\n')
    staged = stage_file(str(path), file_sha256(str(path)), "auto")
    assert staged.decoded == 1
    assert [(d["line"], d["reason"]) for d in staged.dead] == [
        (2, "not a JSON object"),
        (3, "not a JSON object"),
        (4, "not a JSON object"),
    ]
