"""The container image recipe, parsed and checked (no container engine, no network).

Replaying its builder stage for real (`pip install .` from the package index) is in
tests/integration/test_image_build.py; it reuses the parser and the .dockerignore helpers here.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = ROOT / "pyproject.toml"
DEPLOYMENT = ROOT / "manifests" / "deployment.yaml"

BUILD_TOOLS = re.compile(
    r"\b(apt-get|apt|apk|dnf|yum|microdnf|gcc|g\+\+|clang|make|build-essential|pip|pip3|poetry|uv)\b"
)
TEST_PACKAGES = {"pytest", "pytest-asyncio", "hypothesis", "lupa", "cryptography"}


# ---------------------------------------------------------------- a small Dockerfile parser


@dataclass
class Instruction:
    keyword: str
    value: str

    def exec_form(self) -> list[str] | None:
        try:
            parsed = json.loads(self.value)
        except json.JSONDecodeError:
            return None
        return parsed if isinstance(parsed, list) else None

    def flags_and_args(self) -> tuple[dict[str, str], list[str]]:
        flags: dict[str, str] = {}
        args: list[str] = []
        for token in shlex.split(self.value):
            if token.startswith("--") and not args:
                name, _, val = token[2:].partition("=")
                flags[name] = val
            else:
                args.append(token)
        return flags, args

    def run_parts(self) -> tuple[dict[str, str], str]:
        """A RUN's leading flags (`--mount=...`) and its shell command, verbatim."""
        match = re.match(r"((?:--\S+\s+)*)(.*)", self.value, re.S)
        flags = dict(f[2:].partition("=")[::2] for f in match.group(1).split())
        return flags, match.group(2)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None

    def env(self) -> dict[str, str]:
        return parse_key_values(self.all("ENV"))

    def labels(self) -> dict[str, str]:
        return parse_key_values(self.all("LABEL"))


def parse_key_values(instructions: list[Instruction]) -> dict[str, str]:
    out: dict[str, str] = {}
    for ins in instructions:
        tokens = shlex.split(ins.value)
        if len(tokens) >= 2 and "=" not in tokens[0]:  # legacy `ENV KEY value`
            out[tokens[0]] = " ".join(tokens[1:])
            continue
        for token in tokens:
            key, sep, val = token.partition("=")
            assert sep, f"cannot parse {ins.keyword} {ins.value!r}"
            out[key] = val
    return out


def logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # comment inside a continuation
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        lines.append(current)
        current = ""
    assert not current, "Dockerfile ends inside a line continuation"
    return lines


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, value = line.partition(" ")
        keyword, value = keyword.upper(), value.strip()
        if keyword == "FROM":
            parts = value.split()
            flags = [p for p in parts if p.startswith("--")]
            parts = [p for p in parts if not p.startswith("--")]
            assert not flags, "no --platform pinning expected"
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: global_args[m.group(1) or m.group(2)], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=base, name=name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede the first FROM, found {keyword}"
            key, _, default = value.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, value))
    return global_args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())[1]


@pytest.fixture(scope="module")
def builder(stages) -> Stage:
    return stages[0]


@pytest.fixture(scope="module")
def final(stages) -> Stage:
    return stages[-1]


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads(PYPROJECT.read_text())


# ---------------------------------------------------------------- the parser itself


def test_parser_reads_continuations_stages_and_forms():
    text = (
        "ARG IMG=python:3.11-slim\n# c\nFROM ${IMG} AS b\nRUN a \\\n  # inner\n  && b\n"
        'FROM $IMG\nENV A=1 \\\n    B="two words"\nUSER 1:2\nENTRYPOINT ["/x"]\nCMD run\n'
    )
    args, parsed = parse_dockerfile(text)
    assert args == {"IMG": "python:3.11-slim"}
    assert [(s.base, s.name) for s in parsed] == [("python:3.11-slim", "b"), ("python:3.11-slim", None)]
    assert parsed[0].instructions == [Instruction("RUN", "a  && b")]
    assert parsed[1].env() == {"A": "1", "B": "two words"}
    assert parsed[1].last("ENTRYPOINT").exec_form() == ["/x"]
    assert parsed[1].last("CMD").exec_form() is None


# ---------------------------------------------------------------- static checks


def test_multi_stage_on_the_same_slim_python(stages, builder, final):
    assert len(stages) >= 2, "multi-stage build expected"
    assert builder.name == "builder"
    assert builder.base == "python:3.11-slim"
    assert final.base == builder.base, "the venv's interpreter symlinks need the same base image"
    assert final.name is None or final.name != "builder"


def test_python_version_satisfies_pyproject(builder, pyproject):
    version = re.search(r"python:(\d+)\.(\d+)", builder.base)
    assert version, builder.base
    minimum = re.search(r">=\s*(\d+)\.(\d+)", pyproject["project"]["requires-python"])
    assert tuple(map(int, version.groups())) >= tuple(map(int, minimum.groups()))


def test_final_stage_runs_as_the_non_root_user_of_the_deployment(final):
    user = final.last("USER")
    assert user is not None, "final stage must set USER"
    uid, _, gid = user.value.partition(":")
    assert uid.isdigit() and int(uid) != 0, "numeric non-root UID (runAsNonRoot needs a number)"
    assert gid.isdigit() and int(gid) != 0
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    pod_ctx = deployment["spec"]["template"]["spec"]["securityContext"]
    assert int(uid) == pod_ctx["runAsUser"]
    # USER must come after everything that needs root.
    keywords = [i.keyword for i in final.instructions]
    assert "RUN" not in keywords[keywords.index("USER"):]


def test_entrypoint_is_the_console_script(final, pyproject):
    entrypoint = final.last("ENTRYPOINT")
    assert entrypoint is not None
    form = entrypoint.exec_form()
    assert form is not None, "ENTRYPOINT in exec form (signals reach the operator)"
    scripts = pyproject["project"]["scripts"]
    assert form == ["/opt/venv/bin/sunk-sandbox-operator"]
    assert Path(form[0]).name in scripts
    cmd = final.last("CMD").exec_form()
    assert cmd == ["run", "--standalone", "--all-namespaces"]


def test_oci_labels(final, pyproject):
    labels = final.labels()
    for key in ("source", "title", "description", "licenses"):
        value = labels.get(f"org.opencontainers.image.{key}")
        assert value, f"missing label org.opencontainers.image.{key}"
    assert labels["org.opencontainers.image.title"] == pyproject["project"]["name"]
    assert labels["org.opencontainers.image.licenses"] == pyproject["project"]["license"]
    assert labels["org.opencontainers.image.source"].startswith("https://")


def test_final_environment_and_ports(final):
    env = final.env()
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    exposed = {p for ins in final.all("EXPOSE") for p in ins.value.split()}
    assert exposed == {"8080", "8081"}
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {str(p["containerPort"]) for p in container["ports"]} == exposed


def test_final_stage_installs_nothing_and_copies_only_the_venv_and_its_user(final):
    assert not final.all("RUN"), "the final stage runs nothing: no build tools, no package managers"
    assert not final.all("ADD")
    copies = [ins.flags_and_args() for ins in final.all("COPY")]
    assert copies == [({"from": "builder"}, ["/etc/passwd", "/etc/group", "/etc/"]),
                      ({"from": "builder"}, ["/opt/venv", "/opt/venv"])]


def test_the_user_has_passwd_and_group_entries(builder, final):
    """kopf names the operator after getpass.getuser(), which raises for a uid without an entry
    (found by running the image: tests/e2e/test_image.py). The builder appends them to the same
    base's files, and the final stage copies those."""
    uid, _, gid = final.last("USER").value.partition(":")
    written = " ".join(ins.run_parts()[1] for ins in builder.all("RUN"))
    passwd = re.search(rf'"(\w+):x:{uid}:{gid}:[^:"]*:([^:"]*):([^:"]*)" >> /etc/passwd', written)
    assert passwd, "no passwd entry for the final stage's USER"
    name, home, shell = passwd.groups()
    assert home == final.env()["HOME"]
    assert shell.endswith("nologin")
    assert re.search(rf'"{name}:x:{gid}:" >> /etc/group', written), "no group entry"


def test_the_ca_bundle_secret_reaches_only_the_pip_step(builder, final):
    """Where the package index is behind a TLS-inspecting proxy, the host's bundle is a build secret
    mounted for pip only (never a COPY, never in the final stage); without it the step is unchanged."""
    mounted = [(ins.run_parts()[0], ins.run_parts()[1]) for ins in builder.all("RUN") if ins.run_parts()[0]]
    assert len(mounted) == 1
    flags, command = mounted[0]
    assert "pip install" in command
    options = dict(o.partition("=")[::2] for o in flags["mount"].split(","))
    assert options == {"type": "secret", "id": "ca-bundle", "target": "/etc/ssl/certs/ca-certificates.crt",
                       "required": "false"}
    for ins in final.instructions:
        assert "ca-certificates" not in ins.value and "--mount" not in ins.value
    for ins in builder.all("COPY") + builder.all("ADD"):
        assert ".crt" not in ins.value and ".pem" not in ins.value


def test_builder_installs_the_project_without_test_extras(builder):
    installs = [ins.value for ins in builder.all("RUN") if "pip install" in ins.value]
    assert len(installs) == 1, installs
    command = installs[0]
    assert "/opt/venv/bin/pip install" in command
    assert "[" not in command, "no extras (the [test] extra pulls pytest, hypothesis, lupa)"
    assert " -e " not in f" {command} " and "--editable" not in command
    for package in TEST_PACKAGES:
        assert package not in command
    assert "--no-cache-dir" in command, "keep pip's cache out of the layer"
    for ins in builder.all("RUN"):
        assert not re.search(r"\bapt(-get)?\b", ins.value), "slim base plus wheels: no apt build tools"


def test_builder_copies_only_what_the_package_needs(builder):
    sources = set()
    for ins in builder.all("COPY"):
        flags, args = ins.flags_and_args()
        assert "from" not in flags
        sources.update(a.rstrip("/") for a in args[:-1])
    assert sources == {"pyproject.toml", "README.md", "operator"}


def test_dockerignore_keeps_local_state_out_but_not_the_sources(builder):
    patterns = dockerignore_patterns()
    for must_ignore in (".git", ".venv", "operator/x/__pycache__", "operator/sunk_sandbox_operator.egg-info"):
        assert ignored(must_ignore, patterns), must_ignore
    for ins in builder.all("COPY"):
        _, args = ins.flags_and_args()
        for source in args[:-1]:
            assert not ignored(source.rstrip("/"), patterns), f"{source} is COPYed but ignored"
    assert not ignored("operator/sunk_sandbox_operator/__init__.py", patterns)


def test_no_build_tools_anywhere_in_the_final_stage(final):
    for ins in final.instructions:
        if ins.keyword in {"RUN", "ADD"}:
            assert not BUILD_TOOLS.search(ins.value), ins


# ---------------------------------------------------------------- .dockerignore


def dockerignore_patterns() -> list[tuple[bool, str]]:
    out = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        out.append((negate, line.lstrip("!").strip("/")))
    return out


def _matches(path: str, pattern: str) -> bool:
    parts = path.split("/")
    if pattern.startswith("**/"):
        tail = pattern[3:]
        return any(fnmatch.fnmatchcase("/".join(parts[i:i + tail.count("/") + 1]), tail) for i in range(len(parts)))
    # Docker matches a pattern against the path and, for directories, everything below.
    depth = pattern.count("/") + 1
    return fnmatch.fnmatchcase("/".join(parts[:depth]), pattern)


def ignored(path: str, patterns: list[tuple[bool, str]]) -> bool:
    result = False
    for negate, pattern in patterns:
        if _matches(path, pattern):
            result = not negate
    return result


def copy_context(source: Path, dest: Path, rel: str, patterns) -> None:
    """Copy `source` (repo-relative `rel`) to `dest` as a Docker COPY would, honouring ignores."""
    if ignored(rel, patterns):
        return
    if source.is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        for child in sorted(source.iterdir()):
            copy_context(child, dest / child.name, f"{rel}/{child.name}", patterns)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest)
