import shlex
from pathlib import Path

import pytest

from testbed.core.errors import InputError, MissingFeatureError
from testbed.machine import vm


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


def test_cached_trees_are_exported_read_only_and_mounted_with_a_cache(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    trees = vm.cached_trees(str(venv))
    assert trees == [("tb_usr", "/usr"), ("tb_venv", str(venv))]
    assert vm.cached_trees("/usr") == [("tb_usr", "/usr")]  # the system Python: no venv
    spaced = tmp_path / "my venv"  # vng passes --qemu-opts through a shell unquoted
    spaced.mkdir()
    assert vm.cached_trees(str(spaced)) == [("tb_usr", "/usr")]
    argv = vm.vng_argv("vng", Path("/boot/k"), "2G", 2, False, "true", trees)
    opts = [a for a in argv if a.startswith("--qemu-opts=")]
    assert opts[0] == ("--qemu-opts=-virtfs local,path=/usr,mount_tag=tb_usr,"
                       "security_model=none,readonly=on,multidevs=remap")
    assert argv[-2:] == ["--", "true"]
    line = vm.cached_mounts(trees)
    words = shlex.split(line.split(";")[1])
    assert words[:4] == ["mount", "-t", "9p", "-o"]
    assert "cache=loose" in words[4] and words[4].startswith("ro,")
    assert words[5:7] == ["tb_venv", str(venv)]
    # a path qemu's option syntax cannot carry is left on the uncached root
    comma = vm.vng_argv("vng", Path("/k"), "2G", 2, False, "x", [("t", "/a,b")])
    assert not any(a.startswith("--qemu-opts") for a in comma)
    assert vm.cached_mounts([("t", "/a,b")]) == ""


def test_a_working_directory_under_tmp_is_shared_writable():
    # vng --rw overlays /tmp privately: a checkout there is exported again, writable
    assert vm.writable_trees("/tmp/clone/repo") == [("tb_cwd", "/tmp/clone/repo")]
    assert vm.writable_trees("/tmp") == []  # the overlay itself stays private
    assert vm.writable_trees("/srv/repo") == vm.writable_trees("/tmpfoo") == []
    # paths vng's unquoted shell line or qemu's option syntax cannot carry stay private
    assert vm.writable_trees("/tmp/my checkout") == vm.writable_trees("/tmp/a,b") == []
    trees = [("tb_cwd", "/tmp/my checkout")]
    argv = vm.vng_argv("vng", Path("/k"), "2G", 2, False, "true", [("tb_usr", "/usr")], trees)
    opts = [a for a in argv if a.startswith("--qemu-opts=")]
    assert opts[0] == ("--qemu-opts=-virtfs local,path=/tmp/my checkout,mount_tag=tb_cwd,"
                       "security_model=none,multidevs=remap")
    assert "readonly=on" in opts[1]
    line = vm.writable_mounts(trees)
    words = shlex.split(line)
    assert words[:5] == ["{", "mount", "-t", "9p", "-o"] and words[5].startswith("rw,")
    assert "cache" not in words[5]  # every write reaches the host at once
    assert words[6:8] == ["tb_cwd", "/tmp/my checkout"]
    assert "&& cd '/tmp/my checkout'; } ||" in line  # re-enter over the mount
    assert "private to the VM" in words[-2]
    assert vm.writable_mounts([("t", "/tmp/a,b")]) == ""


def test_guest_command_quotes_and_passes_env():
    line = vm.guest_command(["pytest", "-k", "a and b"], env={"CI": "true", "HOME": "/x",
                                                            "TESTBED_FOO": "1"})
    words = shlex.split(line)
    assert words[0] == "env"
    assert "CI=true" in words and "TESTBED_FOO=1" in words and "TESTBED_IN_VM=1" in words
    assert not any(w.startswith("HOME=") for w in words)
    assert words[-4:] == ["--", "pytest", "-k", "a and b"]
    assert words[words.index("-m") + 1] == "testbed.machine.vm_guest"


def test_run_in_vm_rejects_bad_arguments(monkeypatch):
    with pytest.raises(InputError, match="no command"):
        vm.run_in_vm([])
    with pytest.raises(InputError, match="--memory"):
        vm.run_in_vm(["true"], memory="lots")
    monkeypatch.setenv("TESTBED_IN_VM", "1")
    with pytest.raises(InputError, match="already inside"):
        vm.run_in_vm(["true"])


def test_results_folders_under_tmp_are_shared_with_the_vm(tmp_path, monkeypatch):
    monkeypatch.setattr(vm, "PRIVATE_IN_VM", (str(tmp_path),))
    out = tmp_path / "results" / "x"
    trees = vm.output_trees([out, Path("/srv/elsewhere")], shared=[])
    assert trees == [("tb_out0", str(out))] and out.is_dir()
    line = vm.output_mounts(trees)
    assert f"mount -t 9p -o {vm.WRITABLE_MOUNT_OPTS} tb_out0 {out}" in line
    assert "exit 2" in line  # a folder that cannot be mounted stops the command
    # inside a tree that is shared already: nothing more to mount
    assert vm.output_trees([out / "sub"], shared=[str(out)]) == []


def test_a_results_folder_qemu_cannot_name_is_refused_before_boot(tmp_path, monkeypatch):
    monkeypatch.setattr(vm, "PRIVATE_IN_VM", (str(tmp_path),))
    with pytest.raises(InputError, match="plain path"):
        vm.output_trees([tmp_path / "a,b"], shared=[])
    assert not (tmp_path / "a,b").exists()


def test_the_guest_script_travels_in_a_file_not_on_the_kernel_command_line(tmp_path):
    """vng puts the guest's command, base64-encoded, on the kernel command line, which
    x86 Linux cuts at 2048 bytes; a long script (a `testbed run` with its mounts) arrived
    cut and the guest hung at boot.  The script goes into a private file instead, and
    the command line only names it, however long the script is."""
    import base64
    import stat

    inner = "; ".join(f"mount -t 9p tb_{i} /mnt/{'x' * 60}{i}" for i in range(60))
    assert len(base64.b64encode(inner.encode())) > 2048
    script, line = vm.guest_script(inner, tmp_path / "scripts")
    assert script.read_text() == inner + "\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o600
    assert stat.S_IMODE(script.parent.stat().st_mode) == 0o700
    assert line == f"sh {script}" and len(base64.b64encode(line.encode())) < 300
    assert not vm._is_private(str(vm.script_folder()))  # the guest sees it as it is
