"""How the bridge gives memory back (otel_delta/heap.py): glibc's mmap threshold at 1 MiB, pyarrow
on malloc."""

from __future__ import annotations

import os
import subprocess
import sys

# In a fresh interpreter: free a 4 MB block (glibc would then raise its threshold to 4 MB),
# then report how many bytes a live 2 MB block has on mappings of their own.
PROBE = """
import ctypes, sys
from otel_delta.heap import return_large_blocks

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
fixed = return_large_blocks() if sys.argv[1] == "fix" else False
first = bytes(4_000_000)
del first
mapped_before = libc.mallinfo2().hblkhd
second = bytes(2_000_000)
print(fixed, libc.mallinfo2().hblkhd - mapped_before)
"""


def probe(mode: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    ).stdout.split()
    return out[0], int(out[1])


def test_large_blocks_keep_their_own_mappings_once_fixed() -> None:
    fixed, mapped = probe("fix")
    assert fixed == "True"
    assert mapped >= 2_000_000  # its own mapping, unmapped (returned) when freed


def test_without_it_glibc_moves_them_to_the_heap() -> None:
    """What the fix is for: the dynamic threshold would put the 2 MB block in the heap."""
    _, mapped = probe("leave")
    assert mapped < 2_000_000


def test_a_threshold_from_the_environment_is_left_alone() -> None:
    fixed, _ = probe("fix", {"MALLOC_MMAP_THRESHOLD_": "4194304"})
    assert fixed == "False"


POOL = """
import otel_delta.cli
import pyarrow as pa
print(pa.default_memory_pool().backend_name)
"""


def arrow_pool(env: dict[str, str]) -> str:
    return subprocess.run(
        [sys.executable, "-c", POOL],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in {**os.environ, **env}.items() if v},
    ).stdout.strip()


def test_the_cli_has_pyarrow_allocate_with_malloc_unless_the_environment_chose() -> None:
    """pyarrow reads its pool once, when it loads: the CLI must choose before that."""
    assert arrow_pool({"ARROW_DEFAULT_MEMORY_POOL": ""}) == "system"
    assert arrow_pool({"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}) == "mimalloc"
