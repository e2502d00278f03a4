"""Tutorial 7: measure kernel costs on a remote device through TVM RPC.

The cost model builds each candidate kernel here and times it on the device behind an RPC tracker (a board, a
GPU server): the search then optimizes for that device. Here the tracker and the server run on this machine.
Needs TVM's RPC extras (`pip install tornado cloudpickle psutil`; the test suite skips this tutorial without them).

    python tutorials/07_rpc_cost.py
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

import tornado  # noqa: F401  (TVM's RPC tracker needs it)
import cloudpickle  # noqa: F401
import psutil  # noqa: F401

import taso_tvm as taso
from taso_tvm.cost import CostModel, load_cost_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on port {port}")


# 1. On the device: `python -m tvm.exec.rpc_server --tracker HOST:PORT --key my-board`; somewhere both reach:
#    `python -m tvm.exec.rpc_tracker --port PORT`. Both local here.
port, server_port = free_port(), free_port()
env = dict(os.environ, TVM_NUM_THREADS="2")
tracker = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port",
                            str(port), "--port-end", str(port + 1)], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
server = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{port}", "--key",
                           "my-board", "--host", "127.0.0.1", "--port", str(server_port), "--port-end",
                           str(server_port + 1)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
try:
    wait_port(port)
    wait_port(server_port)

    # 2. A cost model that measures on the device: backend "tvm", the device's target, and the tracker's
    #    HOST:PORT:KEY (in a settings file: `cost: {backend: tvm, target: llvm, rpc: "HOST:PORT:KEY"}`).
    cache = os.path.join(tempfile.mkdtemp(), "costs.sqlite")  # measurements are cached per device and target
    config = load_cost_config(backend="tvm", target="llvm", rpc=f"127.0.0.1:{port}:my-board", threads=2,
                              cache=cache, progress=False)

    # 3. Search with it: TASO's README block, whose kernels are timed on the device.
    graph = taso.new_graph()
    x = graph.new_input(dims=(1, 16, 14, 14))
    w1, w2 = graph.new_weight(dims=(16, 16, 3, 3)), graph.new_weight(dims=(16, 16, 3, 3))
    a = graph.conv2d(input=x, weight=w1, strides=(1, 1), padding="SAME", activation="RELU")
    b = graph.conv2d(input=x, weight=w2, strides=(1, 1), padding="SAME", activation="RELU")
    graph.add(a, b)
    with CostModel(config) as cost:
        print("device scope:", cost.scope)
        best = taso.optimize(graph, cost=cost, budget=8, check=True)
        print("cost on the device before/after (ms):", cost.graph_cost(graph.to_tensor_graph()),
              cost.graph_cost(best.to_tensor_graph()))
        print("kernels measured remotely:", cost.backend.counters.measurements)
        assert cost.backend.counters.measurements > 0
finally:
    for proc in (server, tracker):
        os.killpg(proc.pid, 15)
        proc.wait(10)
