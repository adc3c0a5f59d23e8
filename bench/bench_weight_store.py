"""Weight store bandwidth vs memcpy (same run), torch.save/load and safetensors save/load.

    python bench/bench_weight_store.py [--sizes 1,4] [--dir /dev/shm]

State dicts are bf16 with Llama-7B-like shapes (embedding [32000, 4096], per layer four
[4096, 4096] attention and three [11008, 4096] MLP matrices, norms). Memory: for size S GiB the run
holds the source (S), the store's two slots (2S) and a 1 GiB memcpy target; the file-format rows
add up to 2S more after the store is removed. Prints one markdown table.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import statistics
import sys
import tempfile
import time

import torch

from hpcplace.runtime import weight_store as ws

GIB = 1 << 30
HIDDEN, FFN, VOCAB = 4096, 11008, 32000


def llm_state_dict(target_gib: float) -> dict[str, torch.Tensor]:
    """Embedding + as many layers as fit (+ lm_head when room is left), filled with random bf16."""
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    layer = {
        **{f"self_attn.{p}_proj.weight": (HIDDEN, HIDDEN) for p in "qkvo"},
        **{f"mlp.{p}_proj.weight": (FFN, HIDDEN) for p in ("gate", "up")},
        "mlp.down_proj.weight": (HIDDEN, FFN),
        "input_layernorm.weight": (HIDDEN,),
        "post_attention_layernorm.weight": (HIDDEN,),
    }
    size = lambda s: 2 * (s[0] * (s[1] if len(s) > 1 else 1))  # noqa: E731
    total = size(shapes["model.embed_tokens.weight"])
    layer_bytes = sum(size(s) for s in layer.values())
    i = 0
    while total + layer_bytes <= target_gib * GIB * 1.01:
        shapes.update({f"model.layers.{i}.{k}": v for k, v in layer.items()})
        total += layer_bytes
        i += 1
    if total + size((VOCAB, HIDDEN)) <= target_gib * GIB * 1.01:
        shapes["lm_head.weight"] = (VOCAB, HIDDEN)
    shapes["model.norm.weight"] = (HIDDEN,)
    g = torch.Generator().manual_seed(0)
    return {n: torch.randn(s, generator=g, dtype=torch.float32).to(torch.bfloat16) for n, s in shapes.items()}


def nbytes(sd: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in sd.values())


def timed(fn, repeat: int = 1) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def memcpy(sd: dict[str, torch.Tensor], buffer: torch.Tensor) -> None:
    """The same per-tensor copies into a pre-touched buffer (wrapping around): the baseline."""
    offset = 0
    for t in sd.values():
        n = t.numel() * t.element_size()
        if offset + n > buffer.numel():
            offset = 0
        buffer[offset : offset + n].view(t.dtype).view(t.shape).copy_(t)
        offset += (n + 63) // 64 * 64


def run(size_gib: float, base: str, repeat: int) -> list[tuple[str, float, str]]:
    sd = llm_state_dict(size_gib)
    total = nbytes(sd)
    gbs = lambda seconds: total / seconds / 1e9  # noqa: E731
    rows: list[tuple[str, float, str]] = []

    job = tempfile.mkdtemp(prefix="hpcplace-bench-", dir=base)
    os.chmod(job, 0o700)
    publisher = ws.WeightPublisher(job, "bench")
    reader = ws.WeightReader(job, "bench")
    buffer = torch.empty(min(GIB, total + 64 * len(sd)), dtype=torch.uint8)
    buffer.fill_(1)

    def consume_into() -> None:
        with reader.consume() as snap:
            snap.copy_into(sd)  # destination = pre-touched model tensors (values are identical)

    first = timed(lambda: publisher.publish(sd))[0]
    first_consume = timed(consume_into)[0]
    publisher.publish(sd)  # warm the other slot's mappings too
    consume_into()
    samples: dict[str, list[float]] = {"memcpy": [], "publish": [], "consume": []}
    copy_baseline = functools.partial(memcpy, sd, buffer)
    for _ in range(repeat):  # interleaved, so machine noise hits all three alike
        samples["memcpy"] += timed(copy_baseline)
        samples["publish"] += timed(lambda: publisher.publish(sd))
        samples["consume"] += timed(consume_into)
    del buffer, copy_baseline
    # best of N (least disturbed by other load), and the median of per-round ratios
    memcpy_s, publish_s, consume_s = (min(samples[k]) for k in ("memcpy", "publish", "consume"))
    ratio = lambda k: statistics.median(m / x for m, x in zip(samples["memcpy"], samples[k]))  # noqa: E731
    rows.append(("memcpy (pre-touched target, same copies)", gbs(memcpy_s), "1.00x"))
    rows.append(
        (
            "publish, steady state (sampled crc32)",
            gbs(publish_s),
            f"{memcpy_s / publish_s:.2f}x (per-round median {ratio('publish'):.2f}x)",
        )
    )
    rows.append(
        (
            "consume + copy into model tensors, steady",
            gbs(consume_s),
            f"{memcpy_s / consume_s:.2f}x (per-round median {ratio('consume'):.2f}x)",
        )
    )
    rows.append(("publish, first (fallocate + first touch of 2 slots)", gbs(first), f"{memcpy_s / first:.2f}x"))
    rows.append(("consume, first (map + copy)", gbs(first_consume), f"{memcpy_s / first_consume:.2f}x"))
    open_s = min(timed(lambda: reader.consume().release(), repeat))
    rows.append(("consume, zero-copy views only (latency)", float("nan"), f"{open_s * 1e3:.2f} ms"))
    slot = reader._slots[int(ws._read_control(reader._fd)["slot"])]  # the store's internals: a bench
    sampled = min(timed(lambda: ws.checksum(slot.data, "sampled", 1), repeat))
    full = timed(lambda: ws.checksum(slot.data, "full", 1))[0]
    rows.append(("checksum sampled (1024 x 4 KiB crc32)", float("nan"), f"{sampled * 1e3:.2f} ms"))
    rows.append(("checksum full crc32 (optional)", gbs(full), f"{memcpy_s / full:.2f}x"))
    reader.close()
    publisher.remove()
    publisher.close()

    path = os.path.join(job, "sd.pt")
    save = timed(lambda: torch.save(sd, path))[0]
    rows.append(("torch.save to shm", gbs(save), f"{memcpy_s / save:.2f}x"))
    holder: list[object] = []
    load = timed(lambda: holder.append(torch.load(path, weights_only=True)))[0]
    rows.append(("torch.load from shm", gbs(load), f"{memcpy_s / load:.2f}x"))
    holder.clear()
    os.unlink(path)
    gc.collect()

    from safetensors.torch import load_file, save_file

    path = os.path.join(job, "sd.safetensors")
    save = timed(lambda: save_file(sd, path))[0]
    rows.append(("safetensors save_file to shm", gbs(save), f"{memcpy_s / save:.2f}x"))
    load = timed(lambda: holder.append(load_file(path)))[0]
    rows.append(("safetensors load_file (mmap, lazy)", gbs(load), f"{memcpy_s / load:.2f}x"))
    touch = timed(lambda: [sd[n].copy_(t) for n, t in holder[0].items()])[0]  # type: ignore[attr-defined]
    rows.append(("  ... + copy into model tensors", gbs(load + touch), f"{memcpy_s / (load + touch):.2f}x"))
    holder.clear()
    os.unlink(path)
    ws.cleanup(job)
    return [(f"{total / GIB:.2f} GiB, {len(sd)} tensors: {name}", v, rel) for name, v, rel in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4", help="state dict sizes in GiB, comma separated")
    parser.add_argument("--dir", default="/dev/shm", help="where the store and files go")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs", file=sys.stderr)
    print(f"| case | GB/s (steady: best of {args.repeat}) | vs memcpy (bandwidth ratio) / latency |")
    print("|---|---:|---:|")
    for size in (float(s) for s in args.sizes.split(",")):
        for name, value, rel in run(size, args.dir, args.repeat):
            print(f"| {name} | {'' if value != value else f'{value:.2f}'} | {rel} |", flush=True)
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
