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
