"""Run a real Triton Inference Server on this machine, without Docker, and always stop it.

``nvidia-pytriton`` ships the ``tritonserver`` binary and the Python backend. :class:`TritonServer`
prepares what the binary needs (a backend folder with the Python-backend stub for this Python
version; ``libpython`` and PyTriton's bundled libraries on ``LD_LIBRARY_PATH``), starts it on free
loopback ports, waits until the models are ready (or reports *why* not, with the server log) and
stops the whole process group on exit::

    with TritonServer("model_repository") as server:
        ready = triton_client.http_request(server.http_url, "GET", "/v2/health/ready")
        print(ready.status_line)  # HTTP/1.1 200 OK

Two settings are chosen on purpose (see :class:`TritonServer`): ``strict_readiness`` (whether
``/v2/health/ready`` needs *every* model ready) and ``admin_key`` (Triton's restricted-API options:
the administrative APIs answer only requests that carry the key in :data:`ADMIN_HEADER`).

Prometheus metrics are on by default (``--allow-metrics=true`` on a third free loopback port,
:attr:`TritonServer.metrics_url`; read them with
:func:`helpers.serving.triton_client.scrape_metrics`); ``metrics=False`` opens no such port.

It is a :class:`~helpers.core.processes.ManagedProcess`: context manager, ``atexit`` hook, finalizer
and a watchdog process stop the server's whole process group (the server and its Python-backend
stubs), even when the Python process itself dies (e.g. a killed Jupyter kernel).
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import sys
import sysconfig
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.core.processes import ManagedProcess
from helpers.serving.triton_client import LOOPBACK, TritonRequestError, http_request

__all__ = [
    "ADMIN_HEADER",
    "RESTRICTED_APIS",
    "ServerStartError",
    "TritonServer",
    "find_triton",
    "GLIBC_SERVING",
    "free_port",
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
RESTRICTED_APIS = (
    "model-repository",
    "model-config",
    "shared-memory",
    "statistics",
    "trace",
    "logging",
)


class TritonNotFoundError(RuntimeError):
    """The server binary, the Python-backend stub or a library it needs is missing."""


class ServerStartError(RuntimeError):
    """The server exited, or a model did not become ready; the message holds the reason and the log."""


@dataclass(frozen=True)
class TritonInstallation:
    """Where the pieces of the bundled Triton server are on this machine."""

    binary: Path
    backend_files: tuple[Path, ...]  # libtriton_python.so, triton_python_backend_utils.py
    stub: Path  # triton_python_backend_stub built for this Python version
    library_dirs: tuple[Path, ...]  # libpython, nvidia_pytriton.libs
    python_bin: Path  # put first on PATH so the stub's embedded Python finds this environment

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment variables for the server process."""
        env = dict(os.environ if base is None else base)
        libs = [str(p) for p in self.library_dirs]
        if env.get("LD_LIBRARY_PATH"):
            libs.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
        env["PATH"] = os.pathsep.join([str(self.python_bin), env.get("PATH", "")])
        return env


def libpython_dir() -> Path:
    """The folder holding this interpreter's shared ``libpython3.X.so.1.0`` (needed by the stub)."""
    name = (
        sysconfig.get_config_var("INSTSONAME")
        or f"libpython{sys.version_info[0]}.{sys.version_info[1]}.so.1.0"
    )
    candidates = [
        sysconfig.get_config_var("LIBDIR"),
        os.path.join(sys.base_prefix, "lib"),
        os.path.join(sys.prefix, "lib"),
    ]
    for folder in candidates:
        if folder and os.path.isfile(os.path.join(folder, name)):
            return Path(folder)
    raise TritonNotFoundError(
        f"{name} not found in {', '.join(str(c) for c in candidates if c)}: Triton's Python-backend stub embeds "
        "Python and needs it. Use a Python built with --enable-shared (conda and Debian's python3.10 are; "
        "for pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install 3.10)"
    )


def glibc_version() -> tuple[int, int] | None:
    """This machine's glibc as (major, minor), or None where the C library is not glibc."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""  # e.g. "glibc 2.36"
    except (ValueError, OSError, AttributeError):
        return None
    parts = text.split()
    if len(parts) != 2 or parts[0] != "glibc":
        return None
    try:
        major, minor = (int(v) for v in parts[1].split(".")[:2])
    except ValueError:
        return None
    return major, minor


def unavailable_reason() -> str | None:
    """Why Triton cannot run on this machine at all (old glibc, not Linux), or None.

    None does not promise that the installation is complete (:func:`find_triton` checks that and
    fails loudly): only a platform that can never run it gets a reason, so that a chapter may skip
    its serving steps there with one line while a broken install still fails.
    """
    if not sys.platform.startswith("linux"):
        return f"Triton's binaries in nvidia-pytriton are for Linux only (this is {sys.platform})"
    glibc = glibc_version()
    if glibc is None:
        return "nvidia-pytriton's binaries need glibc, and this Linux's C library is not glibc"
    if glibc < GLIBC_SERVING:
        return (
            f"nvidia-pytriton needs glibc >= {GLIBC_SERVING[0]}.{GLIBC_SERVING[1]} and this machine "
            f"has {glibc[0]}.{glibc[1]} (make setup left it out); use an image of Ubuntu 22.04 or "
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
    backend = [
        root / "backends" / "python" / "libtriton_python.so",
        root / "backends" / "python" / "triton_python_backend_utils.py",
    ]
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    libs = root.parent.parent / "nvidia_pytriton.libs"
    missing = [str(p) for p in [binary, stub, libs, *backend] if not p.exists()]
    if missing:
        raise TritonNotFoundError(
            f"the nvidia-pytriton installation lacks {', '.join(missing)} "
            f"(is there a stub for Python {version}?)"
        )
    return TritonInstallation(
        binary=binary,
        backend_files=tuple(backend),
        stub=stub,
        library_dirs=(libpython_dir(), libs),
        python_bin=Path(sys.executable).parent,
    )


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class TritonServer(ManagedProcess):
    """A ``tritonserver`` process on loopback ports, serving ``model_repository``.

    ``models=None`` loads every model of the repository at start-up; a list switches Triton to
    explicit model control and loads only those (others can be loaded later with
    :meth:`load_model`). :meth:`start` returns once the server is live and those models are ready,
    or raises :class:`ServerStartError` with the reason and the end of the server log.

    ``strict_readiness`` (Triton's ``--strict-readiness``, default True): ``/v2/health/ready``
    answers 200 only while every model the server knows is ready, so one model that failed to
    load makes the whole server "not ready" while its other models keep serving; False makes it
    mean "the server answers". Per-model readiness is ``/v2/models/<name>/ready`` either way.
    ``admin_key``: restrict :data:`RESTRICTED_APIS` on HTTP and gRPC to requests carrying
    :data:`ADMIN_HEADER` with this value (this object's own repository calls send it;
    :attr:`admin_headers` gives it to other callers).
    """

    def __init__(
        self,
        model_repository: str | Path,
        *,
        models: Sequence[str] | None = None,
        http_port: int | None = None,
        grpc_port: int | None = None,
        startup_timeout: float = 120.0,
        log_verbose: int = 0,
        metrics: bool = True,
        metrics_port: int | None = None,
        extra_args: Sequence[str] = (),
        strict_readiness: bool = True,
        admin_key: str | None = None,
    ) -> None:
        self.model_repository = Path(model_repository).resolve()
        if not self.model_repository.is_dir():
            raise FileNotFoundError(f"model repository {self.model_repository} does not exist")
        if startup_timeout <= 0:
            raise ValueError(f"startup_timeout must be positive, got {startup_timeout}")
        self.models = list(models) if models is not None else None
        self._fixed_ports = (http_port, grpc_port, metrics_port)
        self.http_port = http_port or 0
        self.grpc_port = grpc_port or 0
        self.metrics = bool(metrics)
        self.metrics_port = metrics_port or 0
        self.startup_timeout = float(startup_timeout)
        self.log_verbose = int(log_verbose)
        self.extra_args = list(extra_args)
        self.strict_readiness = bool(strict_readiness)
        if admin_key is not None and not re.fullmatch(r"[A-Za-z0-9_-]{8,}", admin_key):
            raise ValueError("admin_key: at least 8 characters among letters, digits, _ and -")
        self.admin_key = admin_key
        super().__init__()
        self.startup_s: float | None = None

    # ---- addresses
    @property
    def metrics_url(self) -> str:
        """``127.0.0.1:PORT`` of the Prometheus endpoint (``GET /metrics``); needs ``metrics=True``."""
        if not self.metrics:
            raise RuntimeError("this server was started with metrics=False")
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

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of :meth:`log`."""
        return "\n".join(self.log().splitlines()[-lines:])

    # ---- start / stop
    def _command(self, install: TritonInstallation, backend_dir: Path) -> list[str]:
        cmd = [
            str(install.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backend_dir}",
            f"--http-address={LOOPBACK}",
            f"--http-port={self.http_port}",
            f"--grpc-address={LOOPBACK}",
            f"--grpc-port={self.grpc_port}",
            *(
                [
                    "--allow-metrics=true",
                    f"--metrics-address={LOOPBACK}",
                    f"--metrics-port={self.metrics_port}",
                ]
                if self.metrics
                else ["--allow-metrics=false"]
            ),
            "--exit-timeout-secs=5",
            f"--log-verbose={self.log_verbose}",
            f"--strict-readiness={str(self.strict_readiness).lower()}",
        ]
        if self.admin_key:
            restricted = f"{','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}={self.admin_key}"
            cmd += [
                f"--http-restricted-api={restricted}",
                f"--grpc-restricted-protocol={restricted}",
            ]
        if self.models is not None:
            cmd.append("--model-control-mode=explicit")
            cmd += [f"--load-model={m}" for m in self.models]
        return cmd + self.extra_args

    def start(self) -> TritonServer:
        """Start the server and wait until it and its models are ready (see the class docstring)."""
        if self.is_alive():
            raise RuntimeError(f"server already running (pid {self.pid})")
        install = find_triton()
        for attempt in range(3):
            self._launch(install)
            try:
                self._wait_ready()
                return self
            except ServerStartError as exc:
                port_clash = (
                    "address already in use" in self.log().lower()
                    or "failed to start" in self.log().lower()
                )
                self.stop()
                if not port_clash or any(self._fixed_ports) or attempt == 2:
                    raise exc from None
        raise AssertionError("unreachable")

    def _launch(self, install: TritonInstallation) -> None:
        backend_dir = self.make_workdir("triton-") / "backends"
        (backend_dir / "python").mkdir(parents=True)
        for src in (*install.backend_files, install.stub):
            shutil.copy2(src, backend_dir / "python" / src.name)
        self.http_port = self._fixed_ports[0] or free_port()
        self.grpc_port = self._fixed_ports[1] or free_port()
        while self.grpc_port == self.http_port:
            self.grpc_port = free_port()
        self.metrics_port = self._fixed_ports[2] or free_port()
        while self.metrics_port in (self.http_port, self.grpc_port):
            self.metrics_port = free_port()
        self._start_time = time.perf_counter()
        try:
            self.launch(
                self._command(install, backend_dir),
                output=self.workdir / "server.log",
                env=install.environment(),
            )
        except RuntimeError as exc:  # the watchdog died at once
            raise ServerStartError(str(exc)) from exc

    def error_lines(self, limit: int = 5) -> list[str]:
        """The server log's error lines (``E<date> ... "message"``), last ``limit`` of them."""
        errors = [line for line in self.log().splitlines() if re.match(r"^E\d{4} ", line)]
        return errors[-limit:]

    def _fail(self, reason: str) -> ServerStartError:
        errors = "\n".join(self.error_lines())
        return ServerStartError(
            f"{reason}\n--- errors in the server log ---\n{errors or '(none)'}\n"
            f"--- last lines of the server log ---\n{self.log_tail(25)}"
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
                    states = self.repository_index()
                    wanted = self.models if self.models is not None else [m["name"] for m in states]
                    by_name = {m["name"]: m for m in states}
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

    # ---- model management (KServe v2 repository extension)
    def repository_index(self) -> list[dict[str, Any]]:
        """Every model of the repository with its state (READY, UNAVAILABLE + reason, ...)."""
        resp = http_request(
            self.http_url,
            "POST",
            "/v2/repository/index",
            body=b"{}",
            headers=self.admin_headers,
            timeout=10,
        )
        return resp.json() if resp.status == 200 else []

    def load_model(self, name: str, timeout: float = 120.0) -> float:
        """Load (or reload) ``name`` in explicit mode; returns the seconds it took."""
        start = time.perf_counter()
        resp = self._repository(name, "load", timeout)
        if resp.status != 200:
            raise self._fail(
                f"loading model {name} failed: HTTP {resp.status} {resp.error_message()}"
            )
        return time.perf_counter() - start

    def unload_model(self, name: str, timeout: float = 60.0) -> None:
        """Unload ``name`` (explicit model control); raises :class:`TritonRequestError` on failure."""
        resp = self._repository(name, "unload", timeout)
        if resp.status != 200:
            raise TritonRequestError(resp.status, resp.error_message())

    def _repository(self, name: str, action: str, timeout: float) -> Any:
        """POST /v2/repository/models/<name>/<action> with the admin header."""
        path = f"/v2/repository/models/{name}/{action}"
        return http_request(
            self.http_url, "POST", path, body=b"{}", headers=self.admin_headers, timeout=timeout
        )

    def __repr__(self) -> str:
        return self.describe(self.model_repository.name)
