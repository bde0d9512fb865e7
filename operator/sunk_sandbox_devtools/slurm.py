"""A real Slurm (slurmctld + slurmd + slurmrestd with JWT) for the tests: 22.05, 24.11 or 26.05.

22.05 comes from the host's Debian 12 packages (`make slurm`); 24.11 (trixie) and 26.05 (sid) from
cached debootstrap chroots (slurm_chroot.py; built in the background by `make test`'s image lane).
The recipe is the one measured in `shared/reference/slurm.md` and `slurm-versions.md`: a private
munged, one node that claims 16 CPUs (`SlurmdParameters=config_overrides`), no cgroups, no
accounting, no systemd. Every daemon runs in the foreground as a child of this process (in the
chroot: `unshare --mount` + `chroot`, /proc and /sys mounted in that process's own mount namespace
only), on free loopback ports, with its state in a temp directory (in the chroot's /tmp), so several
test sessions can run side by side. Stopping cancels the jobs, then signals each daemon by the PID
it was started with, and sweeps what they left (slurmstepd, job processes) by a marker in their
environment that names this cluster's state directory: nothing is ever killed by name.
slurmrestd runs as the unprivileged system user `slurmrestd` (it refuses root) with
`SLURM_JWT=daemon` (`-s v0.0.38` on 22.05, `-s slurmctld` later); tokens are minted offline (HS256
over the cluster's jwt key).

The SUNK scheduler is closed source: tests play its part with `submit`, posting through slurmrestd
the placeholder job it would submit for a sandbox pod.

    PYTHONPATH=operator .venv/bin/python -m sunk_sandbox_devtools slurm install   # make slurm (22.05)
    PYTHONPATH=operator .venv/bin/python -m sunk_sandbox_devtools slurm chroots   # 24.11 and 26.05 (cached)
    PYTHONPATH=operator .venv/bin/python -m sunk_sandbox_devtools slurm up [--release 26.05]   # start, print env
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import slurm_chroot

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client", "slurmrestd", "slurm-wlm-basic-plugins",
            "slurm-wlm-jwt-plugin")
PLUGIN_DIR = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm")
# What the harness runs, and the package that ships it: all present means nothing to install.
REQUIRED = {
    "/usr/sbin/munged": "munge",
    "/usr/sbin/slurmctld": "slurmctld",
    "/usr/sbin/slurmd": "slurmd",
    "/usr/sbin/slurmrestd": "slurmrestd",
    "/usr/bin/scontrol": "slurm-client",
    str(PLUGIN_DIR / "auth_jwt.so"): "slurm-wlm-jwt-plugin",
    str(PLUGIN_DIR / "rest_auth_jwt.so"): "slurmrestd",
    str(PLUGIN_DIR / "openapi_v0_0_38.so"): "slurmrestd",
    str(PLUGIN_DIR / "select_cons_tres.so"): "slurm-wlm-basic-plugins",
}
REST_USER = "slurmrestd"   # slurmrestd's own identity (it will not run as root)
API_USER = "k8sop"         # the identity the operator's token names (a non-admin Slurm user)
API_VERSION = "v0.0.38"
LOCK = Path("/tmp/ssb-slurm-install.lock")
HOST_RELEASE = "22.05"
RELEASES = (HOST_RELEASE, *slurm_chroot.SUITES)   # 22.05 (the host's), 24.11, 26.05 (chroots)
# The newest version each release serves: what the harness's own requests use (the operator negotiates).
NEWEST = {"22.05": "v0.0.38", "24.11": "v0.0.42", "26.05": "v0.0.45"}
MARKER = "SSB_SLURM_BASE"  # in every daemon's and job's environment: how stop() finds what they left


def _log(msg: str) -> None:
    print(f"[slurm] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ install


def missing_packages(required: dict[str, str] = REQUIRED) -> list[str]:
    """The packages whose files the harness needs and does not find."""
    return sorted({pkg for path, pkg in required.items() if not Path(path).exists()})


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def ensure_installed() -> float:
    """Install the Debian packages and the two users when missing (apt-get; root only). Idempotent:
    when everything is there it costs a few stat calls. Returns the seconds spent."""
    started = time.monotonic()
    missing = missing_packages()
    users = [u for u in (REST_USER, API_USER) if not _user_exists(u)]
    if not missing and not users:
        return time.monotonic() - started
    if os.geteuid() != 0:
        raise RuntimeError(f"Slurm for the tests needs root to install {' '.join(missing) or 'its users'}: run "
                           f"`sudo apt-get install -y --no-install-recommends {' '.join(PACKAGES)}` "
                           f"and `sudo useradd --system {REST_USER}; sudo useradd {API_USER}`")
    with open(LOCK, "a") as lock:  # two sessions installing at once: one installs, the other waits
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            missing = missing_packages()
            if missing:
                _apt_install()
            for name, system in ((REST_USER, True), (API_USER, False)):
                if not _user_exists(name):
                    subprocess.run(["useradd", *(["--system"] if system else []), "--no-create-home",
                                    "--shell", "/usr/sbin/nologin", name], check=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    took = time.monotonic() - started
    _log(f"installed in {took:.1f}s")
    return took


def _apt_install() -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Postinst scripts must not start the packaged services (no systemd here; ours run per test).
    policy = Path("/usr/sbin/policy-rc.d")
    made_policy = not policy.exists()
    if made_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        _log("apt-get update")
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
        _log(f"apt-get install {' '.join(PACKAGES)}")
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], env=env, check=True)
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)
    still = missing_packages()
    if still:
        raise RuntimeError(f"apt-get installed the packages but {', '.join(still)} still lack files")


# ------------------------------------------------------------------ tokens


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint_token(key: bytes, user: str, lifespan: int = 86400, now: float | None = None) -> str:
    """A Slurm JWT: HS256 over the jwt key, payload {exp, iat, sun} (what `scontrol token` makes)."""
    iat = int(now if now is not None else time.time())
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64(json.dumps({"exp": iat + lifespan, "iat": iat, "sun": user}, separators=(",", ":")).encode())
    signature = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(signature)}"


# ------------------------------------------------------------------ the cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SLURM_CONF = """\
ClusterName=ci
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={base}/munge/munge.socket.2
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={base}/etc/jwt_hs256.key
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=300
MaxJobCount=20000
NodeName={host} NodeAddr=127.0.0.1 CPUs=16 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=sandboxes Nodes={host} MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    """slurmctld + slurmd + slurmrestd (JWT over TCP) on free loopback ports, state in `base` (a host
    path; inside `root`'s /tmp when the release runs in a chroot)."""

    base: Path
    api_user: str = API_USER
    release: str = HOST_RELEASE
    root: Path | None = None                # the chroot (None: the host's packages)
    rest_port: int = 0
    ctld_port: int = 0
    slurmd_port: int = 0
    started_in: float | None = None         # seconds from start() to REST answering
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def api_version(self) -> str:
        """The version the harness's own requests use (the newest the release serves)."""
        return NEWEST[self.release]

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    def inner(self, path: Path) -> str:
        """A path as the daemons see it (inside the chroot, if any)."""
        return "/" + str(path.relative_to(self.root)) if self.root is not None else str(path)

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm's commands and daemons against this cluster (never SLURM_JWT)."""
        return {k: v for k, v in os.environ.items() if k != "SLURM_JWT"} | {
            "SLURM_CONF": self.inner(self.conf), MARKER: str(self.base)}

    def _cmd(self, argv: list[str], user: str | None = None, daemon: bool = False) -> list[str]:
        """argv as `user` (None: root), on the host or in the chroot (daemons: with /proc and /sys)."""
        if self.root is not None:
            return slurm_chroot.in_root(self.root, argv, user, mounts=daemon)
        if user is None:
            return argv
        return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", *argv]

    def _ids(self, user: str) -> tuple[int, int]:
        if self.root is not None:
            return slurm_chroot.ids(self.root, user)
        import pwd

        entry = pwd.getpwnam(user)
        return entry.pw_uid, entry.pw_gid

    def jwt_key(self) -> bytes:
        return (self.base / "etc" / "jwt_hs256.key").read_bytes()

    def token(self, user: str | None = None, lifespan: int = 86400) -> str:
        return mint_token(self.jwt_key(), user or self.api_user, lifespan)

    # -------------------------------------------------------------- start / stop

    def start(self, timeout: float = 45.0) -> "SlurmCluster":
        started = time.monotonic()
        try:
            self._start(started + timeout)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started
        _log(f"Slurm {self.release}: slurmctld + slurmd + slurmrestd ready at {self.url} in {self.started_in:.2f}s "
             f"(base {self.base})")
        return self

    def _start(self, deadline: float) -> None:
        b = self.base
        for d in ("etc", "state", "spool", "run", "log", "munge"):
            (b / d).mkdir(parents=True, exist_ok=True)
        os.chmod(b, 0o755)  # slurmrestd (another user) reads etc/slurm.conf
        munge = self._ids("munge")
        os.chown(b / "munge", *munge)
        os.chmod(b / "munge", 0o711)  # munged wants o+x on its socket's directory
        key = b / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chown(key, *munge)
        os.chmod(key, 0o400)
        jwt = b / "etc" / "jwt_hs256.key"
        jwt.write_bytes(os.urandom(32))
        os.chmod(jwt, 0o600)
        self.rest_port, self.ctld_port, self.slurmd_port = free_port(), free_port(), free_port()
        host = socket.gethostname().split(".")[0]
        self.conf.write_text(SLURM_CONF.format(host=host, base=self.inner(b), ctld_port=self.ctld_port,
                                               slurmd_port=self.slurmd_port))
        os.chmod(self.conf, 0o644)
        if self.root is not None:  # 23.02+ read cgroup.conf: no cgroups here
            (b / "etc" / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
            os.chmod(b / "etc" / "cgroup.conf", 0o644)
            slurm_chroot.ensure_hosts(self.root, host)
        sock = b / "munge" / "munge.socket.2"
        m = lambda name: self.inner(b / "munge" / name)  # noqa: E731
        munged = ["munged", "--foreground", f"--key-file={m('munge.key')}", f"--socket={m('munge.socket.2')}",
                  f"--pid-file={m('munged.pid')}", f"--log-file={m('munged.log')}", f"--seed-file={m('munged.seed')}"]
        self._spawn("munged", self._cmd(munged, "munge", daemon=True) if self.root is not None
                    else ["runuser", "-u", "munge", "--", *munged])
        self._until(lambda: sock.exists(), deadline, "munged's socket")
        conf = self.inner(self.conf)
        self._spawn("slurmctld", self._cmd(["slurmctld", "-D", "-f", conf], daemon=True))
        self._spawn("slurmd", self._cmd(["slurmd", "-D", "-f", conf], daemon=True))
        plugins = API_VERSION if self.release == HOST_RELEASE else "slurmctld"
        self._spawn("slurmrestd", self._cmd(["slurmrestd", "-f", conf, "-a", "rest_auth/jwt", "-s", plugins,
                                             f"127.0.0.1:{self.rest_port}"], REST_USER, daemon=True),
                    env=self.env | {"SLURM_JWT": "daemon"})
        self._until(self._node_idle, deadline, "the node to be idle (sinfo)")
        token = self.token()
        self._until(lambda: self._rest_ping(token), deadline, "slurmrestd's /ping")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.base / "log" / f"{name}.out", "ab")
        self._procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env or self.env, start_new_session=True)
        log.close()

    def _until(self, check, deadline: float, what: str) -> None:
        while True:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}:\n"
                                       f"{self.logs(name)[-3000:]}")
            if check():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm {self.release}: timed out waiting for {what}:\n"
                                   f"{self.logs('slurmctld')[-2000:]}\n{self.logs('slurmd')[-2000:]}")
            time.sleep(0.02)

    def _run(self, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm client command (sinfo, scontrol, scancel) of this release against this cluster."""
        return subprocess.run(self._cmd(argv), env=self.env, capture_output=True, text=True, timeout=timeout)

    def _node_idle(self) -> bool:
        out = self._run(["sinfo", "-h", "-N", "-o", "%T"])
        return out.returncode == 0 and out.stdout.strip().startswith("idle")

    def _rest_ping(self, token: str) -> bool:
        try:
            status, _ = self.request("GET", f"/slurm/{self.api_version}/ping", token=token)
            return status == 200
        except OSError:
            return False

    def logs(self, name: str) -> str:
        texts = []
        for path in (self.base / "log" / f"{name}.out", self.base / "log" / f"{name}.log"):
            if path.exists():
                texts.append(path.read_text(errors="replace"))
        return "\n".join(texts)

    def leftovers(self) -> list[int]:
        """PIDs of what the daemons started and left (slurmstepd and job processes outlive slurmd),
        found by reading /proc, never by name: the marker in their environment (the daemons, the
        jobs), or a file open under this cluster's state directory (slurmstepd, whose environment
        is empty, holds slurmd's log)."""
        wanted = f"{MARKER}={self.base}".encode() + b"\0"
        under = str(self.base) + "/"
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                with open(entry / "environ", "rb") as f:
                    environ = f.read(1 << 20)
                fds = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
            except OSError:  # gone, or a kernel thread
                continue
            if wanted in environ or any(target.startswith(under) for target in fds):
                found.append(int(entry.name))
        return found

    def _jobs_gone(self, deadline: float) -> None:
        """Wait (until `deadline`) for slurmctld to list no job: cancelled jobs end while slurmd runs."""
        while time.monotonic() < deadline:
            try:
                out = self._run(["squeue", "-h", "-o", "%i"], timeout=5)
            except subprocess.TimeoutExpired:
                return
            if out.returncode != 0 or not out.stdout.strip():
                return
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> float:
        """Cancel every job (their processes outlive slurmd otherwise), SIGTERM every daemon at once by
        its PID, SIGKILL what outlives `timeout`, then what they left (by marker), remove the state.
        Returns the seconds it took."""
        started = time.monotonic()
        if self._procs.get("slurmctld") is not None and self._procs["slurmctld"].poll() is None:
            for user in ("root", self.api_user):
                try:
                    self._run(["scancel", "--full", "--quiet", f"--user={user}"], timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            self._jobs_gone(time.monotonic() + 10)
        procs = [p for p in self._procs.values() if p.poll() is None]
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        self._procs.clear()
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not os.environ.get("SLURM_CI_KEEP"):
            shutil.rmtree(self.base, ignore_errors=True)
        return time.monotonic() - started

    # -------------------------------------------------------------- REST and commands (test helpers)

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None,
                user: str | None = None, timeout: float = 10.0) -> tuple[int, Any]:
        """One slurmrestd request (urllib: the tests' own client, not the operator's)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "X-SLURM-USER-NAME": user or self.api_user, "X-SLURM-USER-TOKEN": token or self.token(user),
            **({"Content-Type": "application/json"} if data is not None else {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw) if raw else None
            except ValueError:
                return exc.code, raw.decode(errors="replace")

    def submit(self, name: str, *, partition: str | None = None, hold: bool = False, cpus: int = 1,
               extra: dict | None = None) -> int:
        """Submit a placeholder job as the SUNK scheduler would for a sandbox pod (a `sleep`), through
        slurmrestd, in the shape of the release's newest version (v0.0.38: `script` beside `job` and
        `environment` an object; v0.0.40+: `script` in `job`, `environment` a `K=V` list). The marker
        in its environment lets stop() find its processes. `hold`: it stays PENDING (JobHeldUser)
        until released. Returns the job id."""
        env = {"PATH": "/usr/bin:/bin", MARKER: str(self.base)}
        job: dict[str, Any] = {"name": name, "current_working_directory": "/", "standard_output": "/dev/null",
                               "standard_error": "/dev/null", "cpus_per_task": cpus}
        if partition:
            job["partition"] = partition
        if hold:
            job["hold"] = True
        job.update(extra or {})
        script = "#!/bin/sh\nexec sleep 3600\n"
        if self.api_version == API_VERSION:
            body: dict[str, Any] = {"job": {**job, "environment": env}, "script": script}
        else:
            body = {"job": {**job, "environment": [f"{k}={v}" for k, v in env.items()], "script": script}}
        # slurmctld answers a burst of submits slowly at times (24.11 in a chroot, 8 at once: >10 s)
        status, answer = self.request("POST", f"/slurm/{self.api_version}/job/submit", body, timeout=60)
        # A held job is accepted with errors [{error_code 2042, "Job is in held state, ..."}] on 22.05
        # (a warning from 24.11 on).
        errors = [e for e in (answer.get("errors") or []) if e.get("error_code") != 2042] \
            if isinstance(answer, dict) else []
        if status != 200 or not isinstance(answer, dict) or errors or "job_id" not in answer:
            raise RuntimeError(f"submit of {name!r} failed: HTTP {status}: {answer}")
        return int(answer["job_id"])

    def jobs(self) -> list[dict]:
        status, body = self.request("GET", f"/slurm/{self.api_version}/jobs")
        if status != 200:
            raise RuntimeError(f"GET jobs: HTTP {status}: {body}")
        return body.get("jobs") or []

    def job(self, job_id: int) -> dict:
        status, body = self.request("GET", f"/slurm/{self.api_version}/job/{job_id}")
        if status != 200 or not body.get("jobs"):
            raise RuntimeError(f"GET job {job_id}: HTTP {status}: {body}")
        return body["jobs"][0]

    def cancel(self, job_id: int) -> None:
        self.request("DELETE", f"/slurm/{self.api_version}/job/{job_id}")

    def scontrol(self, *args: str, check: bool = True) -> str:
        out = self._run(["scontrol", *args])
        if check and out.returncode != 0:
            raise RuntimeError(f"scontrol {' '.join(args)}: {out.stderr.strip() or out.stdout.strip()}")
        return out.stdout

    def create_partition(self, name: str, state: str = "UP") -> None:
        host = socket.gethostname().split(".")[0]
        self.scontrol("create", f"PartitionName={name}", f"Nodes={host}", "MaxTime=INFINITE", f"State={state}")

    def set_partition_state(self, name: str, state: str) -> None:
        self.scontrol("update", f"PartitionName={name}", f"State={state}")


def temp_cluster(release: str = HOST_RELEASE) -> SlurmCluster:
    """A fresh cluster of `release` in a temp dir (the pytest fixture): 22.05 from the host's packages
    (installed if missing), 24.11 and 26.05 in their chroots (built once if missing)."""
    if release == HOST_RELEASE:
        ensure_installed()
        return SlurmCluster(Path(tempfile.mkdtemp(prefix="ssb-slurm-"))).start()
    root = slurm_chroot.ensure_root(release).path
    base = Path(tempfile.mkdtemp(prefix="ssb-slurm-", dir=root / "tmp"))
    return SlurmCluster(base, release=release, root=root).start()


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sunk_sandbox_devtools slurm",
                                     description="Slurm (slurmctld, slurmd, slurmrestd with JWT) for the tests.")
    parser.add_argument("action", choices=["install", "chroots", "up"])
    parser.add_argument("--release", choices=RELEASES, default=HOST_RELEASE, help="for up (default 22.05)")
    args = parser.parse_args(argv)
    if args.action == "install":
        missing = missing_packages()
        ensure_installed()
        print("installed: " + " ".join(missing) if missing else "Slurm packages present")
        return 0
    if args.action == "chroots":
        return slurm_chroot.main([])
    cluster = temp_cluster(args.release)
    print(f"export SLURMRESTD_URL={cluster.url}\nexport SLURM_CONF={cluster.conf}\n"
          f"export SLURM_API_USER={cluster.api_user}\nexport SLURMRESTD_TOKEN={cluster.token()}", flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0
