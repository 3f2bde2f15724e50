"""Keyed hashes: how an erased or redacted value is referred to without being kept.

HMAC-SHA256 under the deployment's secret key (`[privacy] hash_key_env`): the same value always
gives the same hash, so joins and audit searches still work, but nobody without the key can
test a guess (an unkeyed hash of an email address is one dictionary lookup away from it).
"""

from __future__ import annotations

import hashlib
import hmac
import re

PREFIX = "hmac-sha256:"
# What `keyed_hash` writes, and nothing looser: redaction leaves such text as it is, so that
# hashing twice gives what hashing once gave (a hash of a hash would break joins on it)
KEYED_HASH = re.compile(re.escape(PREFIX) + "[0-9a-f]{64}")


def keyed_hash(value: str, key: bytes) -> str:
    """`hmac-sha256:<64 hex digits>` of the UTF-8 text under `key` (which must not be empty)."""
    if not key:
        raise ValueError("a keyed hash needs a non-empty key")
    return PREFIX + hmac.new(key, value.encode(), hashlib.sha256).hexdigest()


def is_keyed_hash(text: str) -> bool:
    """Is `text` exactly of the form `keyed_hash` writes (`hmac-sha256:` + 64 lowercase hex)?"""
    return KEYED_HASH.fullmatch(text) is not None
