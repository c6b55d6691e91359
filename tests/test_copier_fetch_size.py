"""The copier's fetch size against the C allocator librdkafka reads fetch responses into (pure: no broker)."""

from __future__ import annotations

import ctypes
import resource
import threading

from mirrorflow.kafka import readers

LIBRDKAFKA_FETCH_MAX_BYTES = 52_428_800  # its default


def _page_faults_per_response(size: int, responses: int = 6) -> list[int]:
    """Minor page faults of a thread that takes `responses` buffers of `size` bytes in turn, fills and frees each, as
    librdkafka's broker thread does with each fetch response it receives."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    faults: list[int] = []

    def receive() -> None:
        for _ in range(responses):
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            buffer = libc.malloc(size)
            ctypes.memset(buffer, 1, size)
            libc.free(buffer)
            faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)

    thread = threading.Thread(target=receive)
    thread.start()
    thread.join()
    return faults


def test_a_fetch_response_of_the_copiers_size_reuses_memory_where_one_of_librdkafkas_default_maps_it_afresh() -> None:
    pages = readers.FETCH_MAX_BYTES // resource.getpagesize()
    assert max(_page_faults_per_response(readers.FETCH_MAX_BYTES)[2:]) < pages // 100
    pages = LIBRDKAFKA_FETCH_MAX_BYTES // resource.getpagesize()
    assert min(_page_faults_per_response(LIBRDKAFKA_FETCH_MAX_BYTES)[2:]) > pages * 9 // 10


def test_the_copiers_consumer_takes_its_fetch_size_unless_the_operator_set_one() -> None:
    assert readers.reader_config({}, "a->b", False)["fetch.max.bytes"] == readers.FETCH_MAX_BYTES
    assert readers.reader_config({"fetch.max.bytes": "52428800"}, "a->b", False)["fetch.max.bytes"] == "52428800"
    larger = readers.reader_config({"message.max.bytes": str(40 << 20)}, "a->b", False)
    assert larger["fetch.max.bytes"] == 40 << 20  # librdkafka refuses a fetch size under the message size
