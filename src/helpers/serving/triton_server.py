"""Run a real Triton Inference Server on this machine, without Docker, and always stop it.

``nvidia-pytriton`` ships the ``tritonserver`` binary and the Python backend. :class:`TritonServer`
gives the binary a backend folder with the Python-backend stub of this Python, ``libpython`` and
PyTriton's libraries on ``LD_LIBRARY_PATH``, free loopback ports (HTTP, gRPC, metrics); it waits
until the models are ready (or says *why* not, with the server log) and stops its whole process
group even when Python dies (a :class:`~helpers.core.processes.ManagedProcess`).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shutil
import socket
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.core.processes import ManagedProcess
from helpers.serving.triton_client import LOOPBACK, TritonRequestError, http_request

__all__ = [
    "ServerStartError",
    "TritonServer",
    "find_triton",
    "GLIBC_SERVING",
    "free_ports",
    "restricted_api_args",
    "unavailable_reason",
]

# nvidia-pytriton 0.7.0 is tagged manylinux_2_35 and its tritonserver needs GLIBC_2.34 and
# GLIBCXX_3.4.30 (tools/doctor.py, which runs before this package is installed, says the same and
# a unit test keeps the two equal). Below it `make setup` installs everything else.
GLIBC_SERVING = (2, 35)

# Triton's restricted-API options (--http-restricted-api, --grpc-restricted-protocol; in 2.51):
# these APIs answer only requests that carry ADMIN_HEADER with the server's key. Inference,
# metadata and health stay open.
ADMIN_HEADER = "triton-admin-key"
RESTRICTED_APIS = ("model-repository", "model-config", "shared-memory", "statistics", "trace")
RESTRICTED_APIS += ("logging",)


def restricted_api_args(key: str) -> list[str]:
    """Start options that open :data:`RESTRICTED_APIS` only to requests carrying ``key``."""
    restricted = f"{','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}={key}"
    return [f"--http-restricted-api={restricted}", f"--grpc-restricted-protocol={restricted}"]


class TritonNotFoundError(RuntimeError):
    """The server binary, the Python-backend stub or a library it needs is missing."""


class ServerStartError(RuntimeError):
    """The server exited, or a model did not become ready; the message holds the reason and the log."""


@dataclass(frozen=True)
class TritonInstallation:
    """Where the pieces of the bundled Triton server are on this machine, and the environment
    variables of its process."""

    binary: Path
    backend_files: tuple[Path, ...]  # libtriton_python.so, triton_python_backend_utils.py
    stub: Path  # triton_python_backend_stub built for this Python version
    env: dict[str, str]


def libpython_dir() -> Path:
    """The folder holding this interpreter's shared ``libpython3.X.so.1.0`` (needed by the stub)."""
    name = (
        sysconfig.get_config_var("INSTSONAME")
        or f"libpython{sys.version_info[0]}.{sys.version_info[1]}.so.1.0"
    )
    prefixes = (sys.base_prefix, sys.prefix)
    candidates = [sysconfig.get_config_var("LIBDIR"), *(os.path.join(p, "lib") for p in prefixes)]
    for folder in candidates:
        if folder and os.path.isfile(os.path.join(folder, name)):
            return Path(folder)
    raise TritonNotFoundError(
        f"{name} not found in {', '.join(str(c) for c in candidates if c)}: Triton's Python-backend stub embeds "
        "Python and needs it. Use a Python built with --enable-shared (conda and Debian's python3.10 are; "
        "for pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install 3.10)"
    )


def unavailable_reason() -> str | None:
    """Why Triton can never run on this machine (old glibc, not Linux), or None: a chapter skips
    its serving steps there with one line; a broken install still fails in :func:`find_triton`."""
    if not sys.platform.startswith("linux"):
        return f"Triton's binaries in nvidia-pytriton are for Linux only (this is {sys.platform})"
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()  # e.g. "glibc 2.36"
        major, minor = (int(v) for v in version.split(".")[:2])
    except (ValueError, OSError, AttributeError):  # no such name, or not "glibc X.Y"
        name = ""
    if name != "glibc":
        return "nvidia-pytriton's binaries need glibc, and this Linux's C library is not glibc"
    if (major, minor) < GLIBC_SERVING:
        return (
            f"nvidia-pytriton needs glibc >= {GLIBC_SERVING[0]}.{GLIBC_SERVING[1]} and this machine "
            f"has {major}.{minor} (make setup left it out); use an image of Ubuntu 22.04 or "
            "newer to run Triton (book/setup.md)"
        )
    return None


def find_triton() -> TritonInstallation:
    """Locate the ``tritonserver`` binary and Python backend shipped in ``nvidia-pytriton``."""
    reason = unavailable_reason()
    if reason:
        raise TritonNotFoundError(f"Triton cannot run on this machine: {reason}")
    try:
        import pytriton
    except ImportError as exc:
        raise TritonNotFoundError(
            "nvidia-pytriton is not installed (pip install nvidia-pytriton==0.7.0, or make setup)"
        ) from exc
    root = Path(pytriton.__file__).parent / "tritonserver"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    binary = root / "bin" / "tritonserver"
    python = root / "backends" / "python"
    backend = [python / "libtriton_python.so", python / "triton_python_backend_utils.py"]
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    libs = root.parent.parent / "nvidia_pytriton.libs"
    missing = [str(p) for p in [binary, stub, libs, *backend] if not p.exists()]
    if missing:
        raise TritonNotFoundError(
            f"the nvidia-pytriton installation lacks {', '.join(missing)} "
            f"(is there a stub for Python {version}?)"
        )
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        filter(None, [str(libpython_dir()), str(libs), env.get("LD_LIBRARY_PATH", "")])
    )
    # this Python's bin first on PATH, so that the stub's embedded Python finds this environment
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return TritonInstallation(binary=binary, backend_files=tuple(backend), stub=stub, env=env)


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct TCP ports free on ``host`` right now (the OS picks them)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]


class TritonServer(ManagedProcess):
    """A ``tritonserver`` process on loopback ports, serving ``model_repository``.

    ``models=None`` loads every model at start-up; a list switches Triton to explicit model
    control and loads only those (others later with :meth:`load_model`). :meth:`start` returns
    once the server is live and those models are ready, or raises :class:`ServerStartError`
    with the reason and the end of the server log.

    ``strict_readiness`` (``--strict-readiness``, default True): ``/v2/health/ready`` answers 200
    only while every model the server knows is ready, so one model that failed to load makes the
    server "not ready" while its other models serve; False makes it mean "the server answers".
    ``admin_key``: :data:`RESTRICTED_APIS` answer only requests carrying :data:`ADMIN_HEADER`
    with it (:attr:`admin_headers`; this object's own repository calls send it).
    """

    def __init__(
        self,
        model_repository: str | Path,
        *,
        models: Sequence[str] | None = None,
        strict_readiness: bool = True,
        admin_key: str | None = None,
    ) -> None:
        self.model_repository = Path(model_repository).resolve()
        if not self.model_repository.is_dir():
            raise FileNotFoundError(f"model repository {self.model_repository} does not exist")
        if admin_key is not None and not re.fullmatch(r"[A-Za-z0-9_-]{8,}", admin_key):
            raise ValueError("admin_key: at least 8 characters among letters, digits, _ and -")
        self.models = list(models) if models is not None else None
        self.strict_readiness = bool(strict_readiness)
        self.admin_key = admin_key
        super().__init__()
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.startup_s: float | None = None

    # ---- addresses
    @property
    def metrics_url(self) -> str:
        """``127.0.0.1:PORT`` of the Prometheus endpoint (``GET /metrics``)."""
        return f"{LOOPBACK}:{self.metrics_port}"

    @property
    def admin_headers(self) -> dict[str, str]:
        """The header the restricted APIs need (empty when the server has no ``admin_key``)."""
        return {ADMIN_HEADER: self.admin_key} if self.admin_key else {}

    @property
    def grpc_admin_headers(self) -> dict[str, str]:
        """The same for gRPC: Triton 2.51 expects the header prefixed ``triton-grpc-protocol-``."""
        return {f"triton-grpc-protocol-{ADMIN_HEADER}": self.admin_key} if self.admin_key else {}

    def kept_files(self) -> tuple[str, ...]:
        """The server log outlives :meth:`stop`."""
        return ("server.log",)

    def log(self) -> str:
        """Everything the server has written so far (kept after :meth:`stop`)."""
        return self.kept("server.log")

    # ---- start / stop
    def _command(self, install: TritonInstallation, backend_dir: Path) -> list[str]:
        cmd = [
            str(install.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backend_dir}",
            *(f"--{api}-address={LOOPBACK}" for api in ("http", "grpc", "metrics")),
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--allow-metrics=true",
            "--exit-timeout-secs=5",
            f"--strict-readiness={str(self.strict_readiness).lower()}",
        ]
        if self.admin_key:
            cmd += restricted_api_args(self.admin_key)
        if self.models is not None:
            cmd.append("--model-control-mode=explicit")
            cmd += [f"--load-model={m}" for m in self.models]
        return cmd

    def start(self) -> TritonServer:
        """Start the server and wait until it and its models are ready; up to three tries when
        the free ports chosen were taken before the server bound them."""
        if self.is_alive():
            raise RuntimeError(f"server already running (pid {self.pid})")
        install = find_triton()
        for attempt in range(3):
            backend_dir = self.make_workdir("triton-") / "backends" / "python"
            backend_dir.mkdir(parents=True)
            for src in (*install.backend_files, install.stub):
                shutil.copy2(src, backend_dir / src.name)
            self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
            self._start_time = time.perf_counter()
            try:
                cmd = self._command(install, backend_dir.parent)
                self.launch(cmd, output=self.workdir / "server.log", env=install.env)
                self._wait_ready()
                return self
            except (ServerStartError, RuntimeError) as exc:  # RuntimeError: the watchdog died
                log = self.log().lower()
                port_clash = "address already in use" in log or "failed to start" in log
                self.stop()
                if not port_clash or attempt == 2:
                    raise ServerStartError(str(exc)) from None
        raise AssertionError("unreachable")

    def _fail(self, reason: str) -> ServerStartError:
        lines = self.log().splitlines()
        errors = "\n".join([line for line in lines if re.match(r"^E\d{4} ", line)][-5:])
        return ServerStartError(
            f"{reason}\n--- errors in the server log ---\n{errors or '(none)'}\n"
            "--- last lines of the server log ---\n" + "\n".join(lines[-25:])
        )

    def _wait_ready(self) -> None:
        deadline = self._start_time + self.startup_timeout
        waiting = "the server"
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise self._fail(
                    f"tritonserver exited with code {self.proc.returncode} during start-up"
                )
            try:
                if http_request(self.http_url, "GET", "/v2/health/live", timeout=2).status == 200:
                    by_name = {m["name"]: m for m in self.repository_index()}
                    wanted = self.models if self.models is not None else list(by_name)
                    for name in wanted:
                        state = by_name.get(name, {})
                        if state.get("state") == "UNAVAILABLE" and state.get("reason"):
                            raise self._fail(f"model {name} failed to load: {state['reason']}")
                    not_ready = [n for n in wanted if by_name.get(n, {}).get("state") != "READY"]
                    if not not_ready:
                        self.startup_s = time.perf_counter() - self._start_time
                        return
                    waiting = f"models {', '.join(not_ready)}"
            except (OSError, http.client.HTTPException):
                pass  # not listening yet
            time.sleep(0.1)
        raise self._fail(
            f"timed out after {self.startup_timeout:.0f} s waiting for {waiting} to become ready"
        )

    grace_s = 10.0  # the Python-backend stubs get time to shut down
    startup_timeout = 120.0  # seconds for the server and its models to become ready

    # ---- model management (KServe v2 repository extension)
    def _repository(self, path: str, timeout: float) -> Any:
        """POST /v2/repository/<path> with the admin header."""
        url, headers = self.http_url, self.admin_headers
        return http_request(url, "POST", f"/v2/repository/{path}", b"{}", headers, timeout)

    def repository_index(self) -> list[dict[str, Any]]:
        """Every model of the repository with its state (READY, UNAVAILABLE + reason, ...)."""
        resp = self._repository("index", 10)
        return resp.json() if resp.status == 200 else []

    def load_model(self, name: str, timeout: float = 120.0) -> None:
        """Load (or reload) ``name`` in explicit mode; :class:`ServerStartError` if it fails."""
        resp = self._repository(f"models/{name}/load", timeout)
        if resp.status != 200:
            raise self._fail(
                f"loading model {name} failed: HTTP {resp.status} {resp.error_message()}"
            )

    def unload_model(self, name: str, timeout: float = 60.0) -> None:
        """Unload ``name`` (explicit model control); raises :class:`TritonRequestError` on failure."""
        resp = self._repository(f"models/{name}/unload", timeout)
        if resp.status != 200:
            raise TritonRequestError(resp.status, resp.error_message())

    def __repr__(self) -> str:
        return self.describe(self.model_repository.name)
