"""Counting on Ray against the local executor, and reading from a local S3 server against the disk.

    python bench/ray_scaling.py --corpus /tmp/corpus1g [--repeat 2] [--budget 4GB]
                                [--realmix ../shared/data/realmix] [--json OUT]

Ray runs: a one-node cluster with 2 CPUs and a two-node cluster with 1 CPU per node, both
simulated on this machine with ray.cluster_utils (127.0.0.1) and started before the timed runs,
as a cluster would be. Each run is `parbpe count` in its own process (local: --workers 2; one node:
--executor ray --workers 2; two nodes: --workers 1 and half the budget, the same budget per CPU),
in interleaved rounds. Per run: wall time, peak RSS of the driver's process tree and of each
node's processes (raylet, its workers, GCS on the head) sampled every 50 ms, and the counts file's
digest (all must be equal). With --realmix, the same counting of realmix read from disk and from a
moto S3 server on 127.0.0.1 (uploaded first), also interleaved.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read when Ray is imported: nodes on 127.0.0.1
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import psutil  # noqa: E402
from harness import save_results  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from parbpe.run.memory import format_size, parse_size, processes_rss  # noqa: E402

REALMIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "realmix")


def node_pids(node) -> list[int]:
    """The processes a Ray node started (raylet, GCS, ...); their children are its workers."""
    return [info.process.pid for infos in node.all_processes.values() for info in infos if info.process]


def tree(pids: list[int]) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
        except psutil.Error:
            pass
    return procs


def run(cmd: list[str], nodes: dict[str, list[int]], env: dict[str, str] | None = None) -> dict:
    """Run cmd; wall time and sampled peak RSS of its tree and of each node's processes."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peaks = {"driver": 0, **{name: 0 for name in nodes}}
    while proc.poll() is None:
        peaks["driver"] = max(peaks["driver"], processes_rss(tree([proc.pid])))
        for name, pids in nodes.items():
            peaks[name] = max(peaks[name], processes_rss(tree(pids)))
        time.sleep(0.05)
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {err.decode()[-2000:]}")
    return {"wall": time.perf_counter() - start, "peak_rss": peaks}


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def count_cmd(inputs: list[str], out: str, workers: int, budget: int, stats: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "parbpe.cli", "count", *inputs, "--out", out, "--workers", str(workers),
            "--memory-budget", str(budget), "--progress", "none", "--stats", stats, *extra]


def ray_runs(args: argparse.Namespace, budget: int, tmp: str) -> dict:
    from ray.cluster_utils import Cluster

    t = time.perf_counter()
    one = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    one_started = time.perf_counter() - t
    two = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    second = two.add_node(num_cpus=1)
    two.wait_for_nodes()
    setups = {
        "local": (count_cmd([args.corpus], f"{tmp}/local.parquet", 2, budget, f"{tmp}/local.json"), {}),
        "ray-1-node": (count_cmd([args.corpus], f"{tmp}/ray1.parquet", 2, budget, f"{tmp}/ray1.json",
                                 "--executor", "ray", "--ray-address", one.address),
                       {"node": node_pids(one.head_node)}),
        "ray-2-nodes": (count_cmd([args.corpus], f"{tmp}/ray2.parquet", 1, budget // 2, f"{tmp}/ray2.json",
                                  "--executor", "ray", "--ray-address", two.address),
                        {"head": node_pids(two.head_node), "node-2": node_pids(second)}),
    }
    results: dict[str, list] = {name: [] for name in setups}
    try:
        for r in range(args.repeat):
            for name, (cmd, nodes) in setups.items():
                measured = run(cmd, nodes)
                out = cmd[cmd.index("--out") + 1]
                stats = json.load(open(cmd[cmd.index("--stats") + 1]))
                measured.update(digest=digest(out), count_seconds=stats["seconds"], ray=stats.get("ray"),
                                bytes_read=stats["bytes_read"])
                results[name].append(measured)
                print(f"round {r + 1} {name:12s} {measured['wall']:6.1f} s  "
                      + "  ".join(f"{k} {format_size(v)}" for k, v in measured["peak_rss"].items())
                      + f"  {measured['digest']}", flush=True)
    finally:
        one.shutdown()
        two.shutdown()
    return {"ray_start_seconds": one_started, "runs": results}


def s3_runs(args: argparse.Namespace, budget: int, tmp: str) -> dict:
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
    client.create_bucket(Bucket="bench")
    shards = sorted(f for f in os.listdir(args.realmix) if f.startswith("train-") and f.endswith(".parquet"))
    for f in shards:
        client.upload_file(os.path.join(args.realmix, f), "bench", f"realmix/{f}")
    setups = {
        "disk": count_cmd([os.path.join(args.realmix, f) for f in shards], f"{tmp}/disk.parquet", 2, budget,
                          f"{tmp}/disk.json"),
        "s3": count_cmd(["s3://bench/realmix/"], f"{tmp}/s3.parquet", 2, budget, f"{tmp}/s3.json"),
    }
    results: dict[str, list] = {name: [] for name in setups}
    try:
        for r in range(args.repeat):
            for name, cmd in setups.items():
                measured = run(cmd, {}, env=env)
                stats = json.load(open(cmd[cmd.index("--stats") + 1]))
                measured.update(digest=digest(cmd[cmd.index("--out") + 1]), count_seconds=stats["seconds"])
                results[name].append(measured)
                print(f"round {r + 1} realmix {name:5s} {measured['wall']:6.1f} s  {measured['digest']}", flush=True)
    finally:
        server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="a corpus directory (bench/make_corpus.py)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--budget", default="4GB", help="memory budget of the local run and of the one-node cluster")
    parser.add_argument("--realmix", default=None, help="also compare reading this from S3 and from disk")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    budget = parse_size(args.budget)
    out: dict = {"budget": budget, "repeat": args.repeat}
    with tempfile.TemporaryDirectory(prefix="parbpe-raybench-") as tmp:
        if args.corpus:
            out["ray"] = ray_runs(args, budget, tmp)
            walls = {name: min(r["wall"] for r in runs) for name, runs in out["ray"]["runs"].items()}
            for name, wall in walls.items():
                print(f"{name:12s} best {wall:6.1f} s  {wall / walls['local']:.2f}x local")
            assert len({r["digest"] for runs in out["ray"]["runs"].values() for r in runs}) == 1, "counts differ"
        if args.realmix:
            out["s3"] = s3_runs(args, budget, tmp)
            walls = {name: min(r["wall"] for r in runs) for name, runs in out["s3"].items()}
            print(f"realmix from S3 {walls['s3']:.1f} s, from disk {walls['disk']:.1f} s: "
                  f"{walls['s3'] / walls['disk']:.2f}x")
            assert len({r["digest"] for runs in out["s3"].values() for r in runs}) == 1, "counts differ"
    if args.json:
        save_results(args.json, **out)


if __name__ == "__main__":
    main()
