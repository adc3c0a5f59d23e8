"""The /dev/shm weight store: exact round trips, standard-tool slots, atomic flips, killed writers,
too-small shm, cleanup."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hpcplace.runtime import weight_store as ws
from hpcplace.runtime.weight_store import WeightPublisher, WeightReader, WeightStoreError

WORKER = str(Path(__file__).with_name("store_worker.py"))


@pytest.fixture
def job(tmp_path: Path) -> str:
    return str(tmp_path / "hpcplace-test")


def mixed_state_dict(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "model.embed_tokens.weight": torch.randn(500, 64, generator=g).to(torch.bfloat16),
        "model.layers.0.mlp.up_proj.weight": torch.randn(172, 64, generator=g).to(torch.bfloat16),
        "model.layers.0.input_layernorm.weight": torch.randn(63, generator=g).to(torch.float16),
        "lm_head.bias": torch.randn(7, generator=g),
        "step": torch.tensor(seed, dtype=torch.int64),
        "mask": torch.rand(13, generator=g) > 0.5,
        "codes": torch.randint(0, 255, (9,), generator=g, dtype=torch.uint8),
        "empty": torch.empty(0, 5),
        "transposed": torch.randn(8, 16, generator=g).t(),  # not contiguous
    }


def test_round_trip_is_exact_and_slots_are_valid_safetensors(job: str) -> None:
    with WeightPublisher(job, "actor-0") as publisher, WeightReader(job, "actor-0") as reader:
        for seed in (1, 2, 3):
            sd = mixed_state_dict(seed)
            version = publisher.publish(sd)
            assert version == seed
            with reader.consume(min_version=version) as snap:
                assert snap.version == version
                assert set(snap.tensors) == set(sd)
                for name, tensor in sd.items():
                    assert snap.tensors[name].dtype == tensor.dtype
                    assert torch.equal(snap.tensors[name], tensor), name
                    assert snap.tensors[name].data_ptr() % tensor.element_size() == 0
            slot = Path(job) / "weights-actor-0" / f"slot{(version - 1) % 2}.safetensors"
            loaded = load_file(str(slot))
            assert all(torch.equal(loaded[n], t) for n, t in sd.items())
        assert publisher.layout is not None and publisher.layout.data_start % 64 == 0


def test_consume_is_zero_copy_and_copy_into_fills_destinations(job: str) -> None:
    sd = mixed_state_dict(5)
    with WeightPublisher(job, "a", lock_timeout=0.2) as publisher, WeightReader(job, "a") as reader:
        publisher.publish(sd)
        with reader.consume() as first, reader.consume() as second:
            assert first.tensors["lm_head.bias"].data_ptr() == second.tensors["lm_head.bias"].data_ptr()
            destination = {n: torch.empty_like(t) for n, t in sd.items()}
            first.copy_into(destination)
            first.release()
            publisher.publish(sd)  # version 2 goes to the other slot
            with pytest.raises(WeightStoreError, match="stayed locked"):  # `second` still holds version 1
                publisher.publish(sd)
        assert all(torch.equal(destination[n], t) for n, t in sd.items())


def test_a_cuda_process_pins_every_mapping_and_unpins_it_before_unmapping(job: str, monkeypatch) -> None:
    """Where CUDA is initialized, each slot mapping is registered with CUDA once (read-only for a reader) and
    unregistered at close; a refused registration leaves the store working on pageable copies. The CUDA calls
    are the boundary faked here: tests/gpu/test_weight_sync_gpu.py makes them on a GPU."""
    from hpcplace.runtime import cuda_host

    calls: list[tuple] = []
    refuse = {"reader": False}

    def register(address: int, size: int, *, read_only: bool) -> str | None:
        calls.append(("register", address, size, read_only))
        return "cudaHostRegister failed with CUDA error 1" if read_only and refuse["reader"] else None

    monkeypatch.setattr(cuda_host, "unavailable_reason", lambda environ=None: None)
    monkeypatch.setattr(cuda_host, "register", register)
    monkeypatch.setattr(cuda_host, "unregister", lambda address: calls.append(("unregister", address)))
    sd = mixed_state_dict(7)
    with WeightPublisher(job, "a") as publisher, WeightReader(job, "a") as reader:
        publisher.publish(sd)
        size = publisher.layout.file_size
        assert [c[2:] for c in calls] == [(size, False), (size, False)]
        assert [s.pinned for s in publisher._slots] == [c[1] for c in calls]
        with reader.consume() as snap:
            assert all(torch.equal(snap.tensors[n], t) for n, t in sd.items())
        assert calls[-1][2:] == (size, True) and reader._slots[0].pinned == calls[-1][1]
        refuse["reader"] = True
        publisher.publish(sd)
        with reader.consume() as snap:  # the other slot: its registration is refused, the data is right
            assert all(torch.equal(snap.tensors[n], t) for n, t in sd.items())
        assert reader._slots[1].pinned == 0
        pinned = [s.pinned for s in publisher._slots] + [reader._slots[0].pinned]
    assert sorted(c[1] for c in calls if c[0] == "unregister") == sorted(pinned)


def test_pinning_is_only_tried_where_cuda_is_initialized(monkeypatch) -> None:
    from hpcplace.runtime import cuda_host

    assert cuda_host.unavailable_reason({cuda_host.PIN_VARIABLE: "0"}) == "HPCPLACE_WEIGHT_STORE_PIN=0"
    assert cuda_host.unavailable_reason({}) == "this process has not initialized CUDA"  # CPU torch, here
    monkeypatch.delitem(sys.modules, "torch")
    assert cuda_host.unavailable_reason({}) == "this process has not initialized CUDA"
    assert cuda_host.register(4096, 4096, read_only=True) == "libcudart is not loaded in this process"


def test_flip_is_atomic_under_a_concurrent_writer(job: str) -> None:
    writer = subprocess.Popen(
        [sys.executable, WORKER, job, "flood", "flood", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    seen: list[int] = []
    reader = None
    try:
        while reader is None:
            try:
                reader = WeightReader(job, "flood")
            except FileNotFoundError:
                pass
        while not seen or seen[-1] < 60:
            with reader.consume(min_version=seen[-1] + 1 if seen else 1, timeout=30) as snap:
                value = float(snap.version)
                for name, tensor in snap.tensors.items():
                    assert bool((tensor == value).all()), f"{name} torn in version {snap.version}"
                seen.append(snap.version)
        _, err = writer.communicate(timeout=30)
        assert writer.returncode == 0, err
    finally:
        if reader is not None:
            reader.close()
        if writer.poll() is None:
            writer.kill()
    assert seen == sorted(seen) and len(set(seen)) > 1


def test_writer_waits_while_a_reader_holds_the_slot_it_needs(job: str) -> None:
    sd = mixed_state_dict(1)
    with WeightPublisher(job, "w", lock_timeout=0.2) as publisher, WeightReader(job, "w") as reader:
        publisher.publish(sd)
        held = reader.consume()
        publisher.publish(mixed_state_dict(2))  # other slot: fine
        with pytest.raises(WeightStoreError, match="stayed locked"):
            publisher.publish(mixed_state_dict(3))  # would overwrite the held version 1
        assert torch.equal(held.tensors["step"], torch.tensor(1))
        held.release()
        assert publisher.publish(mixed_state_dict(3)) == 3


def test_killed_writer_leaves_readers_on_the_last_complete_version(job: str) -> None:
    writer = subprocess.Popen(
        [sys.executable, WORKER, job, "victim", "killed", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        line = writer.stdout.readline()
        assert line.strip() == "mid", writer.stderr.read() if writer.stderr else ""
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    finally:
        if writer.poll() is None:
            writer.kill()
    with WeightReader(job, "victim") as reader:
        assert reader.latest_version() == 1
        with reader.consume(timeout=1) as snap:  # verifies the full checksum
            assert snap.version == 1
            assert all(bool((t == 1.0).all()) for t in snap.tensors.values())
        sys.path.insert(0, str(Path(WORKER).parent))
        try:
            from store_worker import state_dict
        finally:
            sys.path.pop(0)
        with WeightPublisher(job, "victim") as publisher:  # the dead writer's lock is gone
            assert publisher.publish(state_dict(2.0)) == 2
        with reader.consume(min_version=2, timeout=1) as snap:
            assert all(bool((t == 2.0).all()) for t in snap.tensors.values())


def test_corrupted_slot_fails_its_checksum(job: str) -> None:
    with WeightPublisher(job, "c", checksum="full") as publisher:
        publisher.publish({"w": torch.zeros(1000)})
    slot = Path(job) / "weights-c" / "slot0.safetensors"
    with open(slot, "r+b") as fh:
        fh.seek(-4, os.SEEK_END)
        fh.write(b"\x01\x02\x03\x04")
    with WeightReader(job, "c") as reader, pytest.raises(WeightStoreError, match="checksum"):
        reader.consume()


def test_sampled_checksum_covers_large_data_cheaply() -> None:
    data = bytearray(64 << 20)
    view = memoryview(data)
    base = ws.checksum(view, "sampled", 1)
    assert base != ws.checksum(view, "sampled", 2)  # seeded by the version
    data[0] = 1
    assert base != ws.checksum(view, "sampled", 1)
    assert ws.checksum(view, "none", 1) == 0


def test_misuse_is_refused(job: str) -> None:
    with WeightPublisher(job, "m") as publisher:
        publisher.publish({"w": torch.zeros(4)})
        with pytest.raises(WeightStoreError, match="already has a live publisher"):
            WeightPublisher(job, "m")
        with pytest.raises(WeightStoreError, match="another set of tensors"):
            publisher.publish({"w": torch.zeros(5)})
        with pytest.raises(WeightStoreError, match="missing"), publisher.begin({"w": torch.zeros(4)}):
            pass
        with publisher.begin({"w": torch.zeros(4)}) as writer:
            with pytest.raises(WeightStoreError, match="already being written"):
                publisher.begin({"w": torch.zeros(4)})
            writer.write("w", torch.zeros(4))
        with pytest.raises(WeightStoreError, match="the store holds"), publisher.begin({"w": torch.zeros(4)}) as writer:
            writer.write("w", torch.zeros(4, dtype=torch.float64))
        assert publisher.publish({"w": torch.ones(4)}) == 3  # failed attempts left no trace
    with WeightPublisher(job, "m") as again:  # a restarted publisher continues the versions
        with pytest.raises(WeightStoreError, match="another layout"):
            again.publish({"v": torch.zeros(4)})
        assert again.publish({"w": torch.ones(4)}) == 4
    with WeightReader(job, "empty") as reader, pytest.raises(WeightStoreError, match="no version >= 1"):
        reader.consume(timeout=0.05)
    with pytest.raises(WeightStoreError, match="invalid weight store name"):
        WeightPublisher(job, "../x")


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    mount_point = tmp_path / "tiny-shm"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount an 8 MiB tmpfs")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_too_small_shm_gives_a_clear_error_and_writes_nothing(tiny_tmpfs: Path) -> None:
    job = str(tiny_tmpfs / "hpcplace-small")
    sd = {"w": torch.zeros(6 << 20, dtype=torch.uint8)}  # two slots need > 12 MiB
    with WeightPublisher(job, "big") as publisher, pytest.raises(WeightStoreError) as info:
        publisher.publish(sd)
    message = str(info.value)
    assert "needs 12.0 MiB" in message and "free" in message and "HINT" in message
    # only the publisher's own small files (control is reserved when the store is opened)
    assert sorted(os.listdir(Path(job) / "weights-big")) == ["control", "writer.lock"]
    vfs = os.statvfs(tiny_tmpfs)
    assert vfs.f_bfree * vfs.f_frsize > 7 << 20  # the failed reservation was given back
    with WeightPublisher(job, "small") as publisher:  # and a store that fits works
        assert publisher.publish({"w": torch.ones(3 << 20, dtype=torch.uint8)}) == 1


def test_cleanup_removes_everything(job: str) -> None:
    with WeightPublisher(job, "x") as publisher:
        publisher.publish({"w": torch.zeros(10)})
    reader = WeightReader(job, "x")
    reader.consume().release()
    reader.close()
    with WeightPublisher(job, "y") as publisher:
        publisher.publish({"w": torch.zeros(10)})
        publisher.remove()
    assert sorted(os.listdir(job)) == ["weights-x"]
    assert ws.cleanup(job) is True
    assert not os.path.exists(job)
    assert ws.cleanup(job) is False


def test_environment_derives_the_store_location(tmp_path: Path) -> None:
    assert (
        ws.job_dir_from_env({"HPCPLACE_JOB_ID": "77", "SLURMD_NODENAME": "a800-2"})
        == "/dev/shm/hpcplace-77/node-a800-2"
    )
    assert ws.job_dir_from_env({"HPCPLACE_SHM_DIR": "/x", "HPCPLACE_JOB_ID": "77"}) == "/x"
    assert ws.weight_sources({"HPCPLACE_WEIGHT_SYNC_SOURCES": "0,3"}) == [0, 3]
    env = {"HPCPLACE_SHM_DIR": str(tmp_path / "hpcplace-e"), "HPCPLACE_COMPONENT": "actor", "HPCPLACE_RANK": "2"}
    with WeightPublisher.from_env(environ=env) as publisher:
        assert publisher.path.endswith("weights-actor-2")
    with pytest.raises(WeightStoreError, match="HPCPLACE_SHM_DIR"):
        ws.job_dir_from_env({})
