"""How the bridge gives memory back (otel_delta/heap.py): glibc's free pages trimmed, pyarrow on
malloc."""

from __future__ import annotations

import os
import subprocess
import sys

# In a fresh interpreter: leave 190 MB free inside glibc's heap (an 8 MB block freed first
# raises the mmap threshold; fifty 4 MB blocks come from the heap, each followed by a small
# block that stays; the fifty are freed: holes below the heap's top, which free() keeps), then
# report the resident MiB given back within 0.5 s, with (or without) a trim every 0.1 s.
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
started = trim_every(0.1) if sys.argv[1] == "trim" else False
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
