"""The image's SBOM: one CycloneDX 1.6 JSON document of its Python environment and Debian packages.

- The Python environment: `cyclonedx-py environment` (the CycloneDX project's tool, PyPI
  cyclonedx-bom) run inside the image on /opt/venv with the image's own Python (`buildah run`), so the
  interpreter and the paths it reports are the image's. The tool is bind-mounted read-only from a
  cache directory (`pip install --target` of the version the dev venv has, for the image's Python
  minor); nothing of it is installed in the image.
- The Debian packages: dpkg's status file in the image, each installed package a component with its
  purl (`pkg:deb/debian/NAME@VERSION?arch=ARCH&distro=debian-12`), and the distribution from
  /etc/os-release, added with cyclonedx-python-lib (the tool's own library).
- The image is `metadata.component`: a container whose purl and SHA-256 hash are its manifest
  digest (`pkg:oci/sunk-sandbox-operator@sha256:...`), what `buildah pull NAME@DIGEST` fetches and
  what the chart released with it pins; every other component is one of its dependencies.

The document is checked against the CycloneDX 1.6 JSON schema before it is written, and is the
same for the same image (serial number from the digest, timestamp the image's creation time).
syft would read both parts from the archive in one go, but it is not packaged here and a build from
the Go module proxy is hundreds of modules (minutes of cold CI); the Python part is what CycloneDX's
own tool says, and the Debian part is a plain read of dpkg's database.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime
from importlib import metadata
from pathlib import Path

from . import devcluster
from .image import Buildah

TOOL = "cyclonedx-bom"
# The tool, from a directory mounted at /sbomtool, run by the image's system Python (-I: no
# PYTHON* variable, no user site); the venv it reads is a separate interpreter it starts itself.
RUN_TOOL = ("import runpy, sys; sys.path.insert(0, '/sbomtool'); sys.argv[0] = 'cyclonedx-py'; "
            "runpy.run_module('cyclonedx_py', run_name='__main__', alter_sys=True)")
VENV = "/opt/venv"


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str
    source: str | None
    maintainer: str | None
    homepage: str | None


def dpkg_packages(status: str) -> list[DebPackage]:
    """The installed packages of a dpkg status file (stanzas whose Status ends "installed")."""
    out = []
    for stanza in re.split(r"\n\s*\n", status):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
        if fields.get("package") and fields.get("status", "").endswith(" installed"):
            source = fields.get("source", "").split(" ")[0] or None  # "name (version)" when it differs
            out.append(DebPackage(fields["package"], fields.get("version", ""), fields.get("architecture", ""),
                                  source, fields.get("maintainer"), fields.get("homepage")))
    return sorted(out, key=lambda p: (p.name, p.arch))


def os_release(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {k: v.strip().strip('"') for k, v in pairs}


def venv_python(pyvenv_cfg: str) -> str:
    """The venv's Python minor ("3.11") from its pyvenv.cfg."""
    match = re.search(r"^version(?:_info)?\s*=\s*(\d+\.\d+)", pyvenv_cfg, re.M)
    if not match:
        raise RuntimeError("the image's venv has no version in its pyvenv.cfg")
    return match.group(1)


def ensure_tool(python: str) -> Path:
    """cyclonedx-bom (and its pure-Python dependencies) for `python`, installed once per version."""
    version = metadata.version(TOOL)
    dest = devcluster.CACHE_ROOT.parent / "sbom" / f"{TOOL}-{version}-py{python}"

    def install(tmp: Path) -> None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-compile", "--only-binary=:all:", "--python-version", python,
                        "--target", str(tmp), f"{TOOL}=={version}"], check=True)
    return devcluster.ensure_built(dest, install, ("cyclonedx_py/__main__.py",))


def python_bom(b: Buildah, container: str, tool: Path) -> dict:
    done = b("run", "--isolation", "chroot", "--volume", f"{tool}:/sbomtool:ro", container, "--",
             "/usr/bin/python3", "-I", "-c", RUN_TOOL, "environment", VENV, "--sv", "1.6",
             "--output-reproducible", "-o", "-")
    return json.loads(done.stdout)


def image_bom(b: Buildah, ref: str, *, name: str, version: str, digest: str) -> str:
    """The SBOM of the image `ref` (in `b`'s storage) whose manifest digest is `digest`, as JSON text."""
    container = b("from", "--pull=never", "--name", f"ssb-sbom-{uuid.uuid4().hex[:8]}", ref).stdout.strip()
    try:
        rootfs = Path(b("mount", container).stdout.strip())
        try:
            status = (rootfs / "var/lib/dpkg/status").read_text()
            release = os_release((rootfs / "etc/os-release").read_text())
            python = venv_python((rootfs / VENV.lstrip("/") / "pyvenv.cfg").read_text())
        finally:
            b("umount", container, check=False)
        python_doc = python_bom(b, container, ensure_tool(python))
    finally:
        b("rm", container, check=False)
    created = (b.image(ref) or {}).get("OCIv1", {}).get("created")
    return compose(python_doc, dpkg_packages(status), release, name=name, version=version, digest=digest,
                   created=created)


def compose(python_doc: dict, debs: list[DebPackage], release: dict[str, str], *, name: str, version: str,
            digest: str, created: str | None) -> str:
    """cyclonedx-py's document, the Debian packages and the image as its root, validated, as JSON."""
    from cyclonedx.model import HashAlgorithm, HashType
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.contact import OrganizationalEntity
    from cyclonedx.output.json import JsonV1Dot6
    from cyclonedx.validation.json import JsonStrictValidator
    from cyclonedx.schema import SchemaVersion
    from packageurl import PackageURL

    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    bom = Bom.from_json(python_doc)  # type: ignore[attr-defined]  # py-serializable adds it
    python_components = list(bom.components)
    short = name.rsplit("/", 1)[-1]
    image = Component(
        type=ComponentType.CONTAINER, name=name, version=version, bom_ref=f"{name}@{digest}",
        purl=PackageURL("oci", name=short, version=digest,
                        qualifiers={"repository_url": name, "tag": version}),
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=hexdigest)],
        description="the sunk-sandbox-operator image: its manifest digest")
    distro = f"{release.get('ID', 'debian')}-{release.get('VERSION_ID', '')}"
    system = Component(type=ComponentType.OPERATING_SYSTEM, name=release.get("ID", "debian"),
                       version=release.get("VERSION_ID"), description=release.get("PRETTY_NAME"),
                       bom_ref=f"os:{distro}")
    debs_refs: list = []
    for deb in debs:
        purl = PackageURL("deb", release.get("ID", "debian"), deb.name, deb.version,
                          qualifiers={"arch": deb.arch, "distro": distro} | ({"upstream": deb.source} if deb.source else {}))
        component = Component(type=ComponentType.LIBRARY, name=deb.name, version=deb.version, purl=purl,
                              bom_ref=purl.to_string(),
                              supplier=OrganizationalEntity(name=deb.maintainer) if deb.maintainer else None)
        bom.components.add(component)
        debs_refs.append(component)
    bom.components.add(system)
    bom.metadata.component = image
    bom.metadata.timestamp = datetime.fromisoformat(created.replace("Z", "+00:00")) if created else None
    bom.serial_number = uuid.uuid5(uuid.NAMESPACE_URL, f"{name}@{digest}")
    bom.register_dependency(image, [*python_components, *debs_refs, system])
    text = JsonV1Dot6(bom).output_as_string(indent=1)
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if errors:
        raise RuntimeError(f"the SBOM is not valid CycloneDX 1.6: {errors}")
    return text + "\n"


def components(doc: dict) -> dict[str, set[tuple[str, str]]]:
    """An SBOM's {"python": {(name, version)}, "deb": {...}, "os": {...}} (what tests compare with the
    image). Python: pkg:pypi purls, and the distributions installed from a directory (ours: cyclonedx-py
    gives them no purl, only their source)."""
    out: dict[str, set[tuple[str, str]]] = {"python": set(), "deb": set(), "os": set()}
    for c in doc.get("components", []):
        purl_type = (c.get("purl") or "").partition(":")[2].partition("/")[0]
        kind = "os" if c["type"] == "operating-system" else "deb" if purl_type == "deb" else \
            "python" if purl_type in ("pypi", "") else purl_type
        out.setdefault(kind, set()).add((c["name"], c.get("version", "")))
    return out
