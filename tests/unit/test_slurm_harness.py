"""The Slurm test harness' pure parts: the offline JWT and the install check (no daemons, no apt)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from sunk_sandbox_devtools import __main__ as cli
from sunk_sandbox_devtools import slurm


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_a_minted_token_is_an_hs256_jwt_over_the_key_naming_the_user():
    key = b"k" * 32
    token = slurm.mint_token(key, "k8sop", lifespan=600, now=1000)
    header, payload, signature = token.split(".")
    assert json.loads(_unb64(header)) == {"alg": "HS256", "typ": "JWT"}
    assert json.loads(_unb64(payload)) == {"exp": 1600, "iat": 1000, "sun": "k8sop"}
    assert _unb64(signature) == hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert "=" not in token  # base64url without padding, as Slurm's auth/jwt expects


def test_missing_packages_names_the_package_of_each_absent_file(tmp_path):
    present = tmp_path / "slurmctld"
    present.write_text("")
    required = {str(present): "slurmctld", str(tmp_path / "munged"): "munge", str(tmp_path / "x.so"): "munge"}
    assert slurm.missing_packages(required) == ["munge"]
    assert slurm.missing_packages({str(present): "slurmctld"}) == []


def test_the_packages_are_the_documented_ones_and_the_cli_offers_the_harness(capsys):
    assert set(slurm.PACKAGES) == {"munge", "slurmctld", "slurmd", "slurm-client", "slurmrestd",
                                   "slurm-wlm-basic-plugins", "slurm-wlm-jwt-plugin"}
    assert set(slurm.REQUIRED.values()) <= set(slurm.PACKAGES)
    assert cli.main(["--help"]) == 0
    assert "slurm" in capsys.readouterr().out


def test_the_generated_config_has_no_accounting_and_the_test_ports():
    text = slurm.SLURM_CONF.format(host="vm", base="/b", ctld_port=1, slurmd_port=2)
    assert "AccountingStorageType=accounting_storage/none" in text
    assert "SlurmctldHost=vm(127.0.0.1)" in text and "SlurmctldPort=1" in text and "SlurmdPort=2" in text
    assert "AuthAltTypes=auth/jwt" in text and "jwt_key=/b/etc/jwt_hs256.key" in text


def test_a_chroot_daemon_runs_in_its_own_mount_namespace_and_keeps_its_pid(tmp_path):
    """unshare without --fork execs: the PID the harness holds is the daemon's, stopped by that PID;
    /proc and /sys are mounted in that process's namespace only (nothing on the host)."""
    from sunk_sandbox_devtools import slurm_chroot as c

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\nslurmrestd:x:101:102::/:/sbin/nologin\n")
    argv = c.in_root(tmp_path, ["slurmrestd", "-a", "rest_auth/jwt"], "slurmrestd")
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"] and "--fork" not in argv
    script = argv[7]
    assert 'mount -t proc proc "$1/proc"' in script and 'mount -t sysfs sysfs "$1/sys"' in script
    assert script.endswith('exec "$@"')
    assert argv[8:] == ["sh", str(tmp_path), "chroot", "--userspec=101:102", "--groups=102", str(tmp_path),
                        "slurmrestd", "-a", "rest_auth/jwt"]
    assert c.in_root(tmp_path, ["sinfo"], mounts=False) == ["chroot", str(tmp_path), "sinfo"]


def test_the_chroots_are_cached_per_recipe_and_release(tmp_path):
    from sunk_sandbox_devtools import slurm_chroot as c

    assert c.SUITES == {"24.11": "trixie", "26.05": "sid"} and set(c.PACKAGES) == set(slurm.PACKAGES)
    a, b = c.root_path("24.11", tmp_path), c.root_path("26.05", tmp_path)
    assert a.parent == tmp_path and a.name.startswith("trixie-") and b.name.startswith("sid-")
    assert c.root_path("24.11", tmp_path) == a   # stable: the cache is found again
    assert not c.ready("24.11", tmp_path)
    a.mkdir()
    (a / c.READY).write_text("{}")
    assert c.ready("24.11", tmp_path)
    found = c.ensure_root("24.11", tmp_path)   # cached: no debootstrap, no root needed
    assert (found.path, found.built) == (a, False)


def test_a_cluster_in_a_chroot_sees_its_paths_inside_it(tmp_path):
    root = tmp_path / "root"
    base = root / "tmp" / "ssb-slurm-x"
    cluster = slurm.SlurmCluster(base, release="26.05", root=root)
    assert cluster.inner(base / "etc" / "slurm.conf") == "/tmp/ssb-slurm-x/etc/slurm.conf"
    assert cluster.env["SLURM_CONF"] == "/tmp/ssb-slurm-x/etc/slurm.conf"
    assert cluster.env[slurm.MARKER] == str(base) and "SLURM_JWT" not in cluster.env
    assert cluster.api_version == "v0.0.45" and slurm.NEWEST == {"22.05": "v0.0.38", "24.11": "v0.0.42",
                                                                  "26.05": "v0.0.45"}
    host = slurm.SlurmCluster(tmp_path / "b")
    assert host.inner(tmp_path / "b" / "x") == str(tmp_path / "b" / "x") and host.api_version == "v0.0.38"
    assert host._cmd(["scontrol", "ping"]) == ["scontrol", "ping"]
    assert host._cmd(["slurmrestd"], "slurmrestd")[:2] == ["setpriv", "--reuid=slurmrestd"]


def test_leftovers_are_found_by_the_marker_never_by_name(tmp_path):
    """stop() sweeps slurmstepd and job processes by the marker naming this cluster's state dir."""
    import subprocess
    import sys

    cluster = slurm.SlurmCluster(tmp_path / "base")
    other = slurm.SlurmCluster(tmp_path / "base-other")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=cluster.env)
    try:
        assert child.pid in cluster.leftovers() and child.pid not in other.leftovers()
    finally:
        child.kill()
        child.wait()
    assert child.pid not in cluster.leftovers()


def test_the_chroot_names_this_host_so_slurmctld_asks_no_dns(tmp_path):
    from sunk_sandbox_devtools import slurm_chroot as c

    (tmp_path / "etc").mkdir()
    c.ensure_hosts(tmp_path, "vm")
    text = (tmp_path / "etc" / "hosts").read_text()
    assert "127.0.0.1 vm\n" in text and "127.0.0.1 localhost" in text
    before = (tmp_path / "etc" / "hosts").stat().st_mtime_ns
    c.ensure_hosts(tmp_path, "vm")   # unchanged: not rewritten
    assert (tmp_path / "etc" / "hosts").stat().st_mtime_ns == before
    c.ensure_hosts(tmp_path, "other")
    assert "127.0.0.1 other\n" in (tmp_path / "etc" / "hosts").read_text()
