"""Helpers of the distributed session's tests (``uv run nox -s distributed``).

``Launched`` runs a command in its own session (so it and everything it starts can
be killed together), captures its output line by line with the time each line
arrived, and is always killed when the test ends. ``hosts`` builds two simulated
hosts — Linux network namespaces joined by a veth pair, private addresses only —
and removes them after the test, whatever happened.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
MASTER_PORT = "29500"  # inside a private network namespace: nothing else listens there


def child_environment(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENREG_", "GLOO_"))}
    env.update(PYTHONUNBUFFERED="1", **overrides)
    return env


@dataclass
class Launched:
    command: Sequence[str]
    process: subprocess.Popen[str]
    lines: list[tuple[float, str]] = field(default_factory=list)

    @classmethod
    def start(cls, command: Sequence[str], env: dict[str, str]) -> Launched:
        process = subprocess.Popen(
            [str(part) for part in command], env=env, cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True,
        )  # fmt: skip
        launched = cls(command, process)
        threading.Thread(target=launched._read, daemon=True).start()
        return launched

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def first(self, text: str) -> tuple[float, str] | None:
        """The first line containing ``text`` and when it arrived."""
        return next(((t, line) for t, line in list(self.lines) if text in line), None)

    def wait_for_line(self, text: str, timeout: float) -> tuple[float, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.first(text)
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no line with {text!r} from {self.command}:\n{self.output()}")

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if it is still running after ``timeout`` seconds."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()


@pytest.fixture
def launch() -> Iterator[type[Launched]]:
    """``launch(command, env)``: a Launched that is killed (with its children) at the end."""
    started: list[Launched] = []

    def start(command: Sequence[str], env: dict[str, str]) -> Launched:
        launched = Launched.start(command, env)
        started.append(launched)
        return launched

    yield start  # type: ignore[misc]
    for launched in started:
        launched.kill()


# ---- Two simulated hosts ------------------------------------------------------------
NAME_PREFIX = "oreg"  # namespaces and interfaces: oreg<pid>a / oreg<pid>b (at most 15 bytes)
SUBNET = ("10.217.17.1", "10.217.17.2", 30)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def netns_pids(namespace: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(pid) for pid in done.stdout.split()]


def delete_namespace(namespace: str) -> None:
    for pid in netns_pids(namespace):  # nothing may keep it alive
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)


def remove_stale_namespaces() -> None:
    """Namespaces left by a run that was killed before it could clean up."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in (line.split()[0] for line in listed.splitlines() if line.strip()):
        owner = name[len(NAME_PREFIX) : -1]
        if name.startswith(NAME_PREFIX) and owner.isdigit() and not Path(f"/proc/{owner}").exists():
            delete_namespace(name)


@dataclass
class Hosts:
    namespaces: tuple[str, str]
    interfaces: tuple[str, str]
    addresses: tuple[str, str]

    def torchrun(self, launch, node: int, *args: str) -> Launched:
        """torchrun on host ``node`` (0 serves the TCPStore rendezvous), one process per host."""
        command = [
            "ip", "netns", "exec", self.namespaces[node], TORCHRUN, "--nnodes", "2",
            "--node-rank", str(node), "--nproc-per-node", "1", "--master-addr", self.addresses[0],
            "--master-port", MASTER_PORT, EXAMPLE, *args,
        ]  # fmt: skip
        return launch(command, child_environment(GLOO_SOCKET_IFNAME=self.interfaces[node]))

    def set_link_down(self) -> None:
        ip("-n", self.namespaces[0], "link", "set", self.interfaces[0], "down")

    def delete_link(self) -> None:
        ip("-n", self.namespaces[0], "link", "delete", self.interfaces[0])


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    """Two network namespaces joined by a veth pair; removed afterwards, even on failure."""
    problem = None
    if os.geteuid() != 0:
        problem = "needs root (network namespaces)"
    elif shutil.which("ip") is None:
        problem = "needs iproute2's `ip` command"
    if problem:
        if os.environ.get("OPENREG_REQUIRE_NETNS") == "1":
            pytest.fail(f"the simulated multi-host test {problem}")
        pytest.skip(problem)
    remove_stale_namespaces()
    tag = f"{NAME_PREFIX}{os.getpid()}"
    namespaces = (f"{tag}a", f"{tag}b")
    interfaces = (f"{tag}a", f"{tag}b")
    address_a, address_b, prefix = SUBNET
    try:
        for namespace in namespaces:
            ip("netns", "add", namespace)
            ip("-n", namespace, "link", "set", "lo", "up")
        ip("link", "add", interfaces[0], "type", "veth", "peer", "name", interfaces[1])
        for namespace, interface, address in zip(namespaces, interfaces, (address_a, address_b),
                                                 strict=True):  # fmt: skip
            ip("link", "set", interface, "netns", namespace)
            ip("-n", namespace, "addr", "add", f"{address}/{prefix}", "dev", interface)
            ip("-n", namespace, "link", "set", interface, "up")
        yield Hosts(namespaces, interfaces, (address_a, address_b))
    except subprocess.CalledProcessError as error:
        pytest.fail(f"could not build the simulated hosts: {error.cmd}: {error.stderr}")
    finally:
        for namespace in namespaces:
            delete_namespace(namespace)  # also removes the veth pair
        subprocess.run(["ip", "link", "delete", interfaces[0]], capture_output=True)
