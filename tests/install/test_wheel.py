"""What users install is what is tested.

`make test` builds the wheel, installs it into a fresh virtual environment
outside the source tree and runs this suite with that environment's Python
(Q_REQUIRE_WHEEL=1, Q_WHEEL=the wheel). These tests check that the installed
package is the whole source tree, and that a wheel installed by itself, with
nothing else, collects and views a profile.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

TREE = Path(__file__).resolve().parents[2]
TOP = ("common", "qformat", "daemon", "viewer")


def tree_modules() -> dict[str, Path]:
    """qtools.* module name -> source file, for every .py file of the tree."""
    found = {}
    for top in TOP:
        for path in sorted((TREE / top).rglob("*.py")):
            parts = path.relative_to(TREE).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found["qtools." + ".".join(parts)] = path
    return found


def _installed_from_tree() -> bool:
    spec = importlib.util.find_spec("qtools.qformat")
    return spec is not None and spec.origin is not None and \
        Path(spec.origin).resolve().is_relative_to(TREE)


@pytest.fixture(scope="module")
def installed() -> None:
    if _installed_from_tree():
        if os.environ.get("Q_REQUIRE_WHEEL") == "1":
            pytest.fail("Q_REQUIRE_WHEEL=1 but qtools is imported from the source tree")
        pytest.skip("qtools is an editable install here: `make test` tests the wheel")


def test_every_module_of_the_tree_is_installed(installed):
    missing = []
    for name, source in tree_modules().items():
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            missing.append(name)
            continue
        assert Path(spec.origin).read_bytes() == source.read_bytes(), \
            f"{name} is installed from another version of {source}"
    assert not missing, f"modules of the source tree missing from the installed package: {missing}"


def test_the_wheel_holds_every_module_and_both_commands():
    wheel = os.environ.get("Q_WHEEL")
    if not wheel:
        if os.environ.get("Q_REQUIRE_WHEEL") == "1":
            pytest.fail("Q_REQUIRE_WHEEL=1 but Q_WHEEL does not name the wheel")
        pytest.skip("Q_WHEEL is not set (make test sets it)")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names
                            if n.endswith(".dist-info/entry_points.txt"))
    expected = {"/".join(["qtools", *src.relative_to(TREE).parts])
                for src in tree_modules().values()}
    assert not expected - names, f"missing from {wheel}: {sorted(expected - names)}"
    assert "q-syscollect = qtools.daemon.cli:main" in entry_points
    assert "q-view = qtools.viewer.commands.view:run" in entry_points


def _fresh_venv(where: Path) -> Path:
    """A virtual environment with nothing but pip, its dir readable by all."""
    venv.EnvBuilder(with_pip=True, symlinks=True).create(where)
    where.chmod(0o755)
    return where / "bin"


def _wheel(tmp: Path) -> Path:
    """The wheel `make test` built, or one built now from the tree."""
    if os.environ.get("Q_WHEEL"):
        return Path(os.environ["Q_WHEEL"])
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "-w", str(tmp), str(TREE)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return next(tmp.glob("q_tools-*.whl"))


def test_a_wheel_installed_alone_collects_and_views(perf, build, tmp_path):
    """A fresh venv, the wheel and its dependencies from the registry, run
    from a directory that is not the source tree: --version, a collection
    of a small workload, and a view of it."""
    pfan = build("p-fan")
    bin_dir = _fresh_venv(tmp_path / "venv")
    wheel = _wheel(tmp_path)
    r = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", str(wheel)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "Q_DIR")}
    for tool in ("q-view", "q-syscollect"):
        v = subprocess.run([str(bin_dir / tool), "--version"], cwd=work, env=env,
                           capture_output=True, text=True)
        assert v.returncode == 0 and v.stdout.strip() == f"{tool} {_version_of(wheel)}", v
    r = subprocess.run([str(bin_dir / "q-syscollect"), "-i", "--", str(pfan), "1"], cwd=work,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    view = subprocess.run([str(bin_dir / "q-view"), "--comm", pfan.name, "--flat"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=120)
    assert view.returncode == 0, view.stderr
    assert "Flat profile of" in view.stdout and " main\n" in view.stdout, view.stdout
    # the commands ran the venv's own copy, not the tree or the test environment's
    probe = subprocess.run([str(bin_dir / "python"), "-c",
                            "import qtools.viewer.commands.view as m; print(m.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True)
    assert Path(probe.stdout.strip()).is_relative_to(tmp_path / "venv"), probe


def _version_of(wheel: Path) -> str:
    return wheel.name.split("-")[1]
