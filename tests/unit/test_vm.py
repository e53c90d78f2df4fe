import shlex
from pathlib import Path

import pytest

from testbed import vm
from testbed.errors import InputError, MissingFeatureError


def test_find_kernel_picks_newest(tmp_path):
    for v in ("5.10.0-9-amd64", "6.1.0-56-amd64", "6.1.0-9-amd64"):
        (tmp_path / f"vmlinuz-{v}").write_text("")
    assert vm.find_kernel(boot=tmp_path).name == "vmlinuz-6.1.0-56-amd64"


def test_find_kernel_missing(tmp_path):
    with pytest.raises(MissingFeatureError, match="scripts/install --vm"):
        vm.find_kernel(boot=tmp_path)
    with pytest.raises(InputError, match="no such kernel"):
        vm.find_kernel(tmp_path / "nope")


def test_vng_argv_kvm_and_tcg():
    k = Path("/boot/vmlinuz-6.1")
    tcg = vm.vng_argv("vng", k, "2G", 2, False, "echo hi")
    assert tcg == ["vng", "--run", "/boot/vmlinuz-6.1", "--memory", "2G", "--cpus", "2", "--rw",
                   "--disable-kvm", "--", "echo hi"]
    assert "--disable-kvm" not in vm.vng_argv("vng", k, "2G", 2, True, "x")


def test_guest_command_quotes_and_passes_env():
    line = vm.guest_command(["pytest", "-k", "a and b"], env={"CI": "true", "HOME": "/x",
                                                            "TESTBED_FOO": "1"})
    words = shlex.split(line)
    assert words[0] == "env"
    assert "CI=true" in words and "TESTBED_FOO=1" in words and "TESTBED_IN_VM=1" in words
    assert not any(w.startswith("HOME=") for w in words)
    assert words[-4:] == ["--", "pytest", "-k", "a and b"]
    assert words[words.index("-m") + 1] == "testbed.vm_guest"


def test_run_in_vm_rejects_bad_arguments(monkeypatch):
    with pytest.raises(InputError, match="no command"):
        vm.run_in_vm([])
    with pytest.raises(InputError, match="--memory"):
        vm.run_in_vm(["true"], memory="lots")
    monkeypatch.setenv("TESTBED_IN_VM", "1")
    with pytest.raises(InputError, match="already inside"):
        vm.run_in_vm(["true"])
