"""A verl or slime group's node order at job start (hpcplace.runtime.ip_order): which groups are numbered in the
framework's IP order, the order itself, the address exchange between the group's raylets, and the overlay that
status, logs, exec and the driver step read over logs/nodes.txt."""

from __future__ import annotations

import threading
from pathlib import Path

from hpcplace.runtime import ip_order
from hpcplace.runtime.attached import job_node_lists
from hpcplace.runtime.ip_order import exchange, in_ip_order, numeric_key, ordered_by_ip, read_overlay, string_key
from hpcplace.slurm.submit import read_hosts

GROUP = {"num_nodes": 3, "gpus_per_node": [8, 8, 8]}


def header(fmt: str, steer: bool = True, **group: object) -> dict[str, object]:
    return {"source": {"format": fmt}, "node_groups": [{**GROUP, **group}], **({"steer": [{}]} if steer else {})}


def test_verl_and_slime_groups_of_like_nodes_only_are_numbered_by_ip() -> None:
    assert ordered_by_ip(header("verl"), 0) is string_key
    assert ordered_by_ip(header("slime"), 0) is numeric_key
    assert ordered_by_ip(header("verl", steer=False), 0) is None  # launch.steer: false: Slurm's order, checked
    assert ordered_by_ip(header("rlinf"), 0) is None
    assert ordered_by_ip(header("verl", num_nodes=1, gpus_per_node=[8]), 0) is None
    assert ordered_by_ip(header("verl", gpus_per_node=[8, 4, 8]), 0) is None
    assert ordered_by_ip(header("verl", node_env=[{"A": "1"}, {"A": "2"}, {"A": "1"}]), 0) is None
    assert ordered_by_ip(header("verl", node_env=[{"A": "1"}] * 3), 0) is string_key


def test_the_order_is_the_frameworks_own() -> None:
    addresses = ["10.0.0.9", "10.0.0.10", "10.0.0.11"]
    assert in_ip_order(addresses, string_key) == [1, 2, 0]  # verl: as strings, 10.0.0.10 first
    assert in_ip_order(addresses, numeric_key) == [0, 1, 2]  # slime: as numbers
    assert in_ip_order(["10.0.0.2", "10.0.0.1", "10.0.0.1"], numeric_key) == [1, 2, 0]  # ties: Slurm's order


def test_a_node_takes_its_address_from_the_route_to_the_jobs_first_other_reachable_node() -> None:
    routes = {"a800-1": None, "a800-2": "10.0.0.12", "gpu-9": "10.0.0.99"}  # a800-1: itself, via a loopback name
    assert ip_order.own_address(["a800-1", "a800-2", "gpu-9"], routes.get) == "10.0.0.12"
    assert ip_order.own_address(["a800-1"], routes.get) is None
    assert ip_order.route_address("localhost") is None  # a loopback address is no node's address


def test_the_group_exchanges_its_addresses_through_the_run_directory(tmp_path: Path) -> None:
    got: dict[int, object] = {}

    def node(j: int) -> None:
        got[j] = exchange(str(tmp_path), "7.0", 1, j, 3, {"address": f"10.0.0.{12 - j}", "host": f"h{j}"}, 30)

    stale = tmp_path / ip_order.ORDER_DIR / "g1-2.json"
    stale.parent.mkdir(parents=True)
    stale.write_text('{"job_id": "6.0", "address": "x", "host": "old"}')  # an earlier job's: not taken
    threads = [threading.Thread(target=node, args=(j,)) for j in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = [{"job_id": "7.0", "address": f"10.0.0.{12 - j}", "host": f"h{j}"} for j in range(3)]
    assert got == {0: want, 1: want, 2: want}
    assert exchange(str(tmp_path), "8.0", 1, 0, 3, {"address": "a", "host": "h"}, 0.2) is None  # peers missing


def test_readers_take_the_order_the_job_chose_over_slurms(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "nodes.txt").write_text("0 0 a800-1\n0 1 a800-2\n1 0 rtx4090-1\n")
    assert read_overlay(str(logs)) == {}
    ip_order.write_overlay(str(logs), 0, ["a800-2", "a800-1"])
    assert read_overlay(str(logs)) == {(0, 0): "a800-2", (0, 1): "a800-1"}
    assert read_hosts(tmp_path) == {(0, 0): "a800-2", (0, 1): "a800-1", (1, 0): "rtx4090-1"}
    assert job_node_lists(str(tmp_path)) == {0: ["a800-2", "a800-1"], 1: ["rtx4090-1"]}
    assert read_hosts(tmp_path / "none") == {}
