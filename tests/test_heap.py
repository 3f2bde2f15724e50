"""How the bridge gives memory back (otel_delta/heap.py): glibc's free pages trimmed, pyarrow on
malloc."""

from __future__ import annotations

import os
import subprocess
import sys

from otel_delta.heap import free_bytes

# In a fresh interpreter: leave 190 MB free inside glibc's heap (an 8 MB block freed first
# raises the mmap threshold; fifty 4 MB blocks come from the heap, each followed by a small
# block that stays; the fifty are freed: holes below the heap's top, which free() keeps), then
# report the resident MiB given back within 0.5 s, with a trim every 0.1 s of whatever is free
# ("trim"), of more than 400 MB free ("over"), or without one.
PROBE = """
import sys, time
from otel_delta.heap import trim_every

def rss_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024

first = bytearray(8_000_000)
del first
blocks, pins = [], []
for _ in range(50):
    blocks.append(bytearray(4_000_000))
    pins.append(bytearray(200_000))
del blocks
before = rss_mib()
over = {"trim": 0, "over": 400_000_000}.get(sys.argv[1])
started = trim_every(0.1, over) if over is not None else False
time.sleep(0.5)
print(started, round(before - rss_mib()))
"""


def probe(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


def test_free_pages_inside_the_heap_are_given_back() -> None:
    started, freed = probe("trim")
    assert started == "True"
    assert freed >= 150


def test_without_it_glibc_keeps_them() -> None:
    """What the trim is for: freed blocks below the heap's top stay resident."""
    _, freed = probe("leave")
    assert freed < 50


def test_less_free_than_the_threshold_is_left_for_reuse() -> None:
    started, freed = probe("over")
    assert started == "True"
    assert freed < 50


def test_free_bytes_counts_what_glibc_holds_free() -> None:
    blocks, pins = [], []
    for _ in range(200):  # holes between pins, which free() cannot give back by itself
        blocks.append(bytearray(100_000))
        pins.append(bytearray(100_000))  # as large: it cannot come from a small free chunk
    held = free_bytes()  # (the blocks may have come from space that was free before)
    assert held is not None
    del blocks
    after = free_bytes()
    assert after is not None and after - held > 15_000_000


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


# In a fresh interpreter (with or without importing otel_delta.heap first): six threads each
# allocate, each at once given an arena of its own by glibc up to its limit; malloc_info's XML
# then names every arena as a <heap>.
ARENAS = """
import ctypes, os, sys, tempfile, threading
if sys.argv[1] == "heap":
    import otel_delta.heap
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
ready, hold = threading.Semaphore(0), threading.Event()
def work():
    block = bytearray(100_000)
    ready.release()
    hold.wait()
threads = [threading.Thread(target=work) for _ in range(6)]
for thread in threads:
    thread.start()
path = os.path.join(tempfile.mkdtemp(), "info.xml")
for _ in threads:
    ready.acquire()
out = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, out)
libc.fclose(out)
hold.set()
print(open(path).read().count("<heap nr="))
"""


def arenas(mode: str, env: dict[str, str] | None = None) -> int:
    run = subprocess.run(
        [sys.executable, "-c", ARENAS, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return int(run.stdout)


def test_importing_it_limits_glibc_to_two_arenas() -> None:
    assert arenas("heap") <= 2


def test_without_it_each_thread_gets_an_arena_and_the_environment_wins() -> None:
    assert arenas("plain") > 2
    assert arenas("heap", {"MALLOC_ARENA_MAX": "4"}) == 4
