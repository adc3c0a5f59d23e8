"""The preallocated two-record control/state file (shm_dir.RecordFile): in-place writes, a torn
record never read, a concurrent reader only ever sees complete records."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from hpcplace.runtime import shm_dir


@pytest.fixture
def dir_fd(tmp_path: Path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_writes_in_place_and_a_torn_record_is_never_read(dir_fd: int, tmp_path: Path) -> None:
    rf = shm_dir.RecordFile(dir_fd, "state", 32 * 1024, what="test state")
    size = os.stat(tmp_path / "state").st_size
    ino = os.stat(tmp_path / "state").st_ino
    assert rf.read() is None and size == 2 * (20 + 32 * 1024)
    big = b"y" * 20000
    for payload in (b"x" * 10, big, b"z"):
        rf.write(payload)
        assert rf.read() == payload
    assert os.stat(tmp_path / "state").st_ino == ino and os.stat(tmp_path / "state").st_size == size
    assert sorted(os.listdir(tmp_path)) == ["state"]  # no temporary file, ever
    rf.write(b"new-1")
    rf.write(b"new-2")
    os.pwrite(rf.fd, b"\xff", (rf._seq % 2) * rf.record + 22)  # a torn newest record
    assert rf.read() == b"new-1"
    assert shm_dir.read_record(dir_fd, "state", 32 * 1024) == b"new-1"
    with pytest.raises(shm_dir.ShmDirError, match="do not fit"):
        rf.write(b"w" * (32 * 1024 + 1))
    rf.close()


def test_a_concurrent_reader_sees_only_complete_records(dir_fd: int) -> None:
    writer = shm_dir.RecordFile(dir_fd, "state", 32 * 1024, what="test state")
    writer.write(b'{"i": -1}')
    reader = shm_dir.RecordFile(dir_fd, "state", 32 * 1024, what="test state")
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            while not stop.is_set():
                seen.append(json.loads(reader.read() or b"null")["i"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    for i in range(5000):
        writer.write(json.dumps({"i": i, "pad": "p" * (i % 3000)}).encode())
    stop.set()
    thread.join()
    assert not errors, errors
    assert seen == sorted(seen) and seen[-1] <= 4999  # complete records, never older than one seen before
    writer.close()
    reader.close()
