"""`streammap doctor`: each check reports pass/warn/fail with a fix and never crashes; the command
exits non-zero only when something is broken."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import types
from types import SimpleNamespace

import pytest

from streammap.cluster import doctor
from tests.helpers.telemetry import NVMLError, fake_nvml, gpu


def _nvml(driver="550.54.15", n=2):
    m = fake_nvml([gpu() for _ in range(n)])
    m.nvmlSystemGetDriverVersion = lambda: driver.encode()
    return m


def _cupy(count=2, hip=False, fail=False):
    def device_count():
        if fail:
            raise RuntimeError("cudaErrorNoDevice")
        return count
    rt = SimpleNamespace(is_hip=hip, getDeviceCount=device_count,
                         runtimeGetVersion=lambda: 60_032_830 if hip else 12040)
    return SimpleNamespace(__version__="13.3.0", cuda=SimpleNamespace(runtime=rt))


# -- driver and GPU runtime -------------------------------------------------------------------------

def test_a_recent_driver_passes_and_an_old_one_fails_with_a_fix():
    ok = doctor.check_driver(_nvml("550.54.15"))
    assert (ok.status, ok.detail) == ("pass", "driver 550.54.15, 2 GPU(s)")
    old = doctor.check_driver(_nvml("375.26"))
    assert old.status == "fail" and "384.81" in old.fix


def test_no_driver_is_a_warning_not_a_crash():
    m = _nvml()

    def no_library():
        raise NVMLError(12, "NVML Shared Library Not Found")
    m.nvmlInit = no_library
    c = doctor.check_driver(m)
    assert c.status == "warn" and "Shared Library Not Found" in c.detail and "--emulate" in c.detail


def test_gpu_runtime_names_cuda_or_rocm_and_fails_when_gpus_are_unusable():
    assert doctor.check_gpu_runtime(None).status == "warn"
    missing = doctor.check_gpu_runtime(None, nvml_gpus=2)
    assert missing.status == "fail" and "streammap[gpu]" in missing.fix
    cuda = doctor.check_gpu_runtime(_cupy(2), nvml_gpus=2)
    assert cuda.status == "pass" and "CUDA 12.4" in cuda.detail
    rocm = doctor.check_gpu_runtime(_cupy(1, hip=True))
    assert rocm.status == "pass" and "ROCm/HIP 6.0" in rocm.detail
    assert doctor.check_gpu_runtime(_cupy(fail=True), nvml_gpus=2).status == "fail"
    assert doctor.check_gpu_runtime(_cupy(1), nvml_gpus=2).status == "warn"


# -- Ray ----------------------------------------------------------------------------------------------

class FakeRay:
    def __init__(self, nodes=2, refuse=False):
        self._nodes = [{"NodeID": f"n{i}", "Alive": True, "NodeManagerAddress": f"10.0.0.{i}"} for i in range(nodes)]
        self.refuse = refuse

    def init(self, **kw):
        if self.refuse:
            raise ConnectionError("could not connect to 10.0.0.9:6379")

    def nodes(self):
        return self._nodes


def test_ray_connects_or_fails_with_a_fix():
    assert doctor.check_ray("10.0.0.0:6379", FakeRay(3)).detail.endswith("3 node(s) alive")
    bad = doctor.check_ray("10.0.0.9:6379", FakeRay(refuse=True))
    assert bad.status == "fail" and "ray start --head" in bad.fix


def test_network_is_measured_and_compared_with_the_cluster_file(monkeypatch):
    cluster = load_cluster_dict({"bandwidth": "25 GB/s", "latency": "5us"})
    # A clock that moves only when the link works (no sleeps, so no load on the machine can change
    # what is measured): a 2 ms round trip, 10 ms per MiB (~0.1 GB/s).
    clock = [0.0]
    monkeypatch.setattr(doctor, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def ping():
        clock[0] += 0.002

    def send(n):
        clock[0] += 0.01 * n / (1 << 20)

    def slow_link(ray, a, b):
        return ping, send
    c = doctor.check_network("head:6379", cluster, FakeRay(2), nbytes=1 << 20, link=slow_link)
    assert c.status == "warn" and "cluster file: 25.00 GB/s" in c.detail
    latency, bandwidth = doctor.measure_link(ping, send, 1 << 20, 2)
    assert latency == pytest.approx(0.001) and bandwidth == pytest.approx((1 << 20) / 0.01)
    assert doctor.check_network(None).status == "skip"
    assert doctor.check_network("head:6379", None, FakeRay(1)).status == "skip"


def load_cluster_dict(network):
    from streammap.cluster.model import Cluster, ClusterSpec
    spec = ClusterSpec.model_validate({"name": "c", "network": network, "nodes": [
        {"name": f"n{i}", "devices": [{"name": "cpu", "kind": "cpu"}]} for i in range(2)]})
    return Cluster(spec)


# -- Kubernetes ---------------------------------------------------------------------------------------

@pytest.fixture
def api_server():
    """A fake API server answering GET /version with the version the test sets."""
    answer = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(answer).encode()
            token = answer.get("_token")
            if token and self.headers.get("Authorization") != f"Bearer {token}":
                self.send_response(401)
                self.end_headers()
                return
            self.send_response(200 if self.path == "/version" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", answer
    srv.shutdown()


def _kubeconfig(tmp_path, server, user="{}"):
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
current-context: lab
contexts: [{{name: lab, context: {{cluster: lab, user: me}}}}]
clusters: [{{name: lab, cluster: {{server: "{server}"}}}}]
users: [{{name: me, user: {user}}}]
""")
    return path


def test_kubernetes_version_is_read_from_the_api_server(tmp_path, api_server):
    server, answer = api_server
    answer.update(major="1", minor="29+", gitVersion="v1.29.4")
    ok = doctor.check_kubernetes(_kubeconfig(tmp_path, server))
    assert ok.status == "pass" and ok.detail.startswith("v1.29.4")
    answer.update(major="1", minor="15", gitVersion="v1.15.12")
    old = doctor.check_kubernetes(_kubeconfig(tmp_path, server))
    assert old.status == "fail" and "1.16" in old.fix


def test_the_contexts_token_is_sent_and_refused_credentials_warn(tmp_path, api_server):
    server, answer = api_server
    answer.update(major="1", minor="30", gitVersion="v1.30.1", _token="s3cret")
    assert doctor.check_kubernetes(_kubeconfig(tmp_path, server, "{token: s3cret}")).status == "pass"
    refused = doctor.check_kubernetes(_kubeconfig(tmp_path, server, "{token: wrong}"))
    assert refused.status == "warn" and "HTTP 401" in refused.detail and "kubectl version" in refused.fix


def test_rocm_devices_are_listed_when_present():
    from streammap.cluster.model import DeviceSpec
    found = [DeviceSpec(name="gpu0", kind="gpu", vendor="amd", model="AMD Instinct MI300X")]
    c = doctor.check_rocm(lambda: (found, ["ROCm: 1 device(s) from amdsmi"]))
    assert c.status == "pass" and "gpu0 AMD Instinct MI300X" in c.detail
    assert doctor.check_rocm(lambda: ([], [])).status == "skip"


def test_no_kubeconfig_is_skipped_and_a_dead_server_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert doctor.check_kubernetes().status == "skip"
    dead = doctor.check_kubernetes(_kubeconfig(tmp_path, "http://127.0.0.1:9"), timeout=1)
    assert dead.status == "fail" and "kubectl cluster-info" in dead.fix


# -- storage, cluster file, the command ----------------------------------------------------------------

def test_storage_throughput_is_measured_where_asked(tmp_path):
    c = doctor.check_storage(tmp_path, size_mb=4)
    assert c.status in ("pass", "warn") and "MB/s" in c.detail and list(tmp_path.iterdir()) == []
    assert doctor.check_storage(tmp_path / "missing", size_mb=1).status == "fail"


def test_a_bad_cluster_file_fails(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("name: c\nnodes: []\n")
    c, cluster = doctor.check_cluster_file(bad)
    assert c.status == "fail" and cluster is None
    assert c.detail.startswith(f"{bad}:2: nodes: List should have at least 1 item")     # where to fix it


def test_doctor_on_this_machine_finishes_and_explains_what_is_missing(tmp_path):
    # how long it takes (target: under 30 s) is measured by benchmarks/doctor_time.py
    r = subprocess.run([sys.executable, "-m", "streammap.cli", "doctor", "--path", str(tmp_path), "--size", "8"],
                       capture_output=True, text=True, timeout=60)
    fails = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert r.returncode == (1 if fails else 0), r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert {"nvidia driver", "gpu runtime", "rocm devices", "ray", "kubernetes", "network", "storage"} <= {
        line.split("  ")[1].strip() for line in r.stdout.splitlines()[:-1] if not line.startswith(" ")}


def test_one_failure_makes_the_exit_status_non_zero(tmp_path, capsys):
    from streammap.cli import main
    # the devices' measurement (seconds of GEMMs) is no part of this: the whole doctor runs above
    assert main(["doctor", "--path", str(tmp_path / "missing"), "--size", "1", "--no-calibrate"]) == 1
    assert "FAIL  storage" in capsys.readouterr().out


def test_network_between_two_real_ray_nodes(ray_cluster):
    """Two Ray nodes on this machine (the session's, ray.cluster_utils): Ray actors on each carry the
    measurement."""
    claim = load_cluster_dict({"bandwidth": "1 TB/s", "latency": "1us"})
    check = doctor.check_network(ray_cluster.address, claim, nbytes=4 << 20)
    assert check.status == "warn", check          # no network carries 1 TB/s between processes
    assert "GB/s" in check.detail and "cluster file: 1000.00 GB/s" in check.detail
    assert doctor.check_ray(ray_cluster.address).detail.endswith("2 node(s) alive")
