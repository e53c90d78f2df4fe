import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("vagrant") is None,
                                reason="vagrant is not installed (scripts/install adds it "
                                       "where the distribution packages it)")


def validate(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["vagrant", "validate", "--ignore-provider"], cwd=folder,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(folder),
                               "VAGRANT_HOME": str(folder / ".vagrant.d")})


def test_vagrantfile_validates(tmp_path):
    shutil.copy(ROOT / "Vagrantfile", tmp_path / "Vagrantfile")
    res = validate(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "validated successfully" in res.stdout


def test_broken_vagrantfile_is_caught(tmp_path):
    text = (ROOT / "Vagrantfile").read_text().replace("config.vm.box = box",
                                                      "config.vm.bogus_key = 1")
    (tmp_path / "Vagrantfile").write_text(text)
    assert validate(tmp_path).returncode != 0


def test_vagrantfile_provisions_with_install_script_and_syncs_folder():
    text = (ROOT / "Vagrantfile").read_text()
    assert "bash scripts/install" in text
    assert 'synced_folder ".", "/vagrant"' in text
    for provider in ("virtualbox", "libvirt", "parallels"):
        assert f'provider "{provider}"' in text
