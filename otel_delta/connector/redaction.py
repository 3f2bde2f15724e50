"""Redaction: rewrite personal data inside telemetry rows, keeping the rows.

Two kinds of target:
- an attribute key (`user.email`): its value in every attribute map of the row (the row's own,
  the resource's, the scope's, each event's, link's and exemplar's, the metric metadata); its
  exact-type entry in the matching `*attribute_types` map goes with it, since that entry holds
  the value too (an empty value, NULL, holds nothing: it stays unless dropped);
- a regular expression: every match inside attribute values and log bodies. A value kept as
  exact-type JSON as well (an array or kvlist, in `*attribute_types` or `body_type`) is
  decoded, the pattern applied to each string inside it (not to its kvlist keys, as a pattern
  leaves attribute keys alone too), and both texts written again from the result as the
  converters write them: the JSON escapes non-ASCII text (`\\u00e9`), so the pattern over the
  raw JSON would miss such values, and would leave the JSON and the readable text disagreeing.

Three modes: `hash` replaces a value (or a match) by its keyed hash, so equal values stay equal
and joins still work; `mask` by `MASK`; `drop` removes the attribute (or the matched text).
Redacting again changes nothing: in `hash` mode a value (or text inside a value) already of the
form the keyed hash writes is kept as it is, so equal values stay equal however often a
redaction runs, and a row counts as affected only if something in it changed. The functions
here work on rows as Python dicts; `Table.redact` picks the rows, writes them
back partition by partition, and purges the old files like a hard delete.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from otel_delta.convert import anyvalue
from otel_delta.errors import InvalidQueryError
from otel_delta.privacy import KEYED_HASH, is_keyed_hash

Mode = Literal["hash", "mask", "drop"]
MODES: tuple[Mode, ...] = ("hash", "mask", "drop")
MASK = "***"
ATTRIBUTES = "attributes"
TYPES = "attribute_types"
METADATA = "metric_metadata"  # an attribute list too, with its types in `metric_metadata_types`


@dataclass(frozen=True)
class Redaction:
    """What to rewrite and how; `hash_text` is the keyed hash (None unless mode is hash)."""

    attribute: str | None
    pattern: re.Pattern[str] | None
    mode: Mode
    hash_text: Callable[[str], str] | None

    def replacement(self, value: str) -> str | None:
        """The new text of a whole value (None: drop it). An earlier run's keyed hash stays
        as it is: hashed again, it would no longer equal the hash of the same value."""
        if self.mode == "drop":
            return None
        if self.mode == "mask":
            return MASK
        assert self.hash_text is not None
        return value if is_keyed_hash(value) else self.hash_text(value)

    def in_text(self, text: str) -> str:
        """`text` with every match of the pattern replaced. In hash mode the keyed hashes an
        earlier run wrote into it are kept whole and the pattern is applied between them: a
        pattern for hex digits would otherwise find them inside those hashes."""
        assert self.pattern is not None
        pattern = self.pattern

        def replaced(piece: str) -> str:
            return pattern.sub(lambda m: self.replacement(m.group(0)) or "", piece)

        if self.mode != "hash":
            return replaced(text)
        pieces, start = [], 0
        for hashed in KEYED_HASH.finditer(text):
            pieces += [replaced(text[start : hashed.start()]), hashed.group(0)]
            start = hashed.end()
        pieces.append(replaced(text[start:]))
        return "".join(pieces)

    def describe(self) -> str:
        target = f"attribute {self.attribute!r}" if self.attribute else "pattern (hashed)"
        return f"{self.mode} {target}"


def redaction(
    attribute: str | None,
    pattern: str | None,
    mode: str,
    hash_text: Callable[[str], str] | None,
) -> Redaction:
    """Checked arguments: exactly one of attribute and pattern, a known mode, a valid regex."""
    if (attribute is None) == (pattern is None):
        raise InvalidQueryError("redact needs exactly one of attribute= and pattern=")
    if mode not in MODES:
        raise InvalidQueryError(f"redact mode must be one of {list(MODES)}, got {mode!r}")
    if attribute is not None and not attribute:
        raise InvalidQueryError("redact: attribute must not be empty")
    compiled = None
    if pattern is not None:
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise InvalidQueryError(f"redact: invalid pattern: {exc}") from None
        if compiled.search("") is not None:
            raise InvalidQueryError("redact: the pattern matches the empty string")
    return Redaction(attribute, compiled, mode, hash_text)  # type: ignore[arg-type]


def redact_row(row: dict[str, Any], how: Redaction) -> bool:
    """Rewrite `row` in place; True if anything in it changed."""
    changed = False
    for name in list(row):
        value = row[name]
        types_name = _types_column(name)
        if types_name is not None and isinstance(value, list):
            new, new_types, hit = _redact_map(value, row.get(types_name), how)
            if hit:
                row[name] = new
                if types_name in row:
                    row[types_name] = new_types
                changed = True
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:  # events, links, exemplars: nested rows with attribute maps
                changed |= redact_row(item, how)
        elif name == "body" and how.pattern is not None and isinstance(value, str):
            body_type = row.get("body_type")
            new_body, new_type = _redact_value(value, body_type, how)
            if (new_body, new_type) != (value, body_type):
                row[name] = new_body
                if "body_type" in row:
                    row["body_type"] = new_type
                changed = True
    return changed


def _types_column(name: str) -> str | None:
    """The column with the exact types of the attribute list `name` (None: not one)."""
    if name.endswith(ATTRIBUTES):
        return name[: -len(ATTRIBUTES)] + TYPES
    return METADATA + "_types" if name == METADATA else None


Pairs = list[tuple[str, str | None]]


def _redact_map(
    pairs: Pairs, types: Pairs | None, how: Redaction
) -> tuple[Pairs, Pairs | None, bool]:
    if how.attribute is not None:
        if not any(key == how.attribute for key, _ in pairs):
            return pairs, types, False
        new: Pairs = []
        rewritten = False
        for key, value in pairs:
            if key != how.attribute:
                new.append((key, value))
            elif value is None and how.mode != "drop":
                # an empty AnyValue (NULL, typed `empty`): nothing to hash or mask; it keeps
                # its type entry, which holds no value
                new.append((key, value))
            else:
                rewritten = True
                if value is not None and (replaced := how.replacement(value)) is not None:
                    new.append((key, replaced))
        # the exact-type entry holds the value as typed JSON: it goes in every mode
        kept = types
        if rewritten and types is not None:
            kept = [(k, v) for k, v in types if k != how.attribute]
        # unchanged when an earlier run already redacted it (hash, mask): not an affected row
        return new, kept, new != pairs or kept != types
    type_of = dict(types or ())
    new, new_type_of = [], {}
    for key, value in pairs:
        text, type_ = _redact_value(value, type_of.get(key), how)
        new.append((key, text))
        if type_ != type_of.get(key):
            new_type_of[key] = type_
    new_types = types
    if new_type_of and types is not None:
        new_types = [
            (k, new_type_of.get(k, v)) for k, v in types if new_type_of.get(k, v) is not None
        ]
    return new, new_types, new != pairs or new_types != types


def _redact_value(
    text: str | None, type_: str | None, how: Redaction
) -> tuple[str | None, str | None]:
    """A value's (text, type) with every match of the pattern redacted (anyvalue.encode's
    pair). An array or kvlist is redacted in its exact-type JSON, string by string, and both
    texts are encoded again from it; a scalar that is no longer its number, bool or bytes once
    redacted loses its type and becomes the string it now is (`to_otlp` still reads it)."""
    if text is None:
        return text, type_  # an empty value: nothing to redact
    if type_ is not None and type_.startswith("{"):
        value = anyvalue.decode(text, type_)
        return anyvalue.encode(value) if _redact_strings(value, how) else (text, type_)
    new = how.in_text(text)
    return new, (type_ if new == text else None)


def _redact_strings(value: AnyValue, how: Redaction) -> bool:
    """Redact every string inside `value` in place (kvlist keys stay, as attribute keys do);
    True if any changed."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        new = how.in_text(value.string_value)
        if new == value.string_value:
            return False
        value.string_value = new
        return True
    if kind == "array_value":
        return any([_redact_strings(item, how) for item in value.array_value.values])
    if kind == "kvlist_value":
        return any([_redact_strings(kv.value, how) for kv in value.kvlist_value.values])
    return False
