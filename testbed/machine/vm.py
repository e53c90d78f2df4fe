"""Run a command inside a VM that boots the distribution kernel (``testbed vm -- CMD``).

Some hosts (containers, CI sandboxes, minimal cloud kernels) lack ``sch_netem`` or the
``openvswitch`` module.  virtme-ng (``vng``) boots the installed stock kernel over the
host's own filesystem, so the VM sees the checkout, the venv and every installed tool.
The checkout stays writable (``--rw``); ``/tmp`` inside the VM is a private overlay, so
a working directory under ``/tmp`` is shared into the guest once more, writable
(`writable_trees`), or whatever the command writes there would stay in the VM.
The guest gets this machine's kernel records folder in ``TESTBED_KERNEL_RECORDS``
(`testbed.machine.kernel`; shared writable if it lies under ``/tmp``), so
``testbed vm -- testbed doctor`` records the VM kernel's facts where a dry run here
reads them.

KVM is used when it works with the stock kernel (probed once per kernel and cached);
otherwise the VM runs under software emulation (TCG), which is slower but complete.
Inside the VM, `testbed.machine.vm_guest` loads the kernel modules, starts private Open vSwitch
daemons (their database lives in the VM's tmpfs, never in the host's ``/etc``), runs the
command and returns its exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from testbed.core.commands import CommandRunner, which
from testbed.core.errors import InputError, MissingFeatureError
from testbed.machine.kernel import records_dir

PASS_ENV = ("CI", "PYTHONUNBUFFERED", "TERM", "COLUMNS", "NO_COLOR", "FORCE_COLOR",
            "PYTEST_ADDOPTS")
KVM_PROBE_TIMEOUT = 40.0
# 9p options for the read-only trees the guest sees with its page cache on (see
# `cached_trees`); vng's own root mount has no cache, so every exec and import re-reads
# its files from the host
CACHED_MOUNT_OPTS = "ro,trans=virtio,version=9p2000.L,access=any,msize=512000,cache=loose"
# and for a working directory the guest writes to (no cache: the host sees every write)
WRITABLE_MOUNT_OPTS = "rw,trans=virtio,version=9p2000.L,access=any,msize=512000"


def _version_key(path: Path) -> list:
    parts = re.split(r"[.\-+~]", path.name.removeprefix("vmlinuz-"))
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts]


def find_kernel(kernel: Path | None = None, boot: Path = Path("/boot")) -> Path:
    """The kernel image to boot: kernel if given, else the newest ``/boot/vmlinuz-*``.

    kernel: explicit image path; boot: where distribution kernels are installed.
    """
    if kernel is not None:
        if not kernel.is_file():
            raise InputError(f"--kernel {kernel}: no such kernel image")
        return kernel
    images = sorted(boot.glob("vmlinuz-*"), key=_version_key)
    if not images:
        raise MissingFeatureError(
            f"no distribution kernel in {boot}; run `scripts/install --vm` "
            "(installs linux-image-amd64 / linux-image-generic)")
    return images[-1]


def kernel_release(kernel: Path | None = None) -> str:
    """The release (``uname -r`` inside the VM) of the kernel `run_in_vm` boots: its
    image's name after ``vmlinuz-``.  kernel: explicit image path (see `find_kernel`)."""
    return find_kernel(kernel).name.removeprefix("vmlinuz-")


def find_vng() -> str:
    """Path of the ``vng`` command (the project's venv first)."""
    here = Path(sys.prefix) / "bin" / "vng"
    if here.exists():
        return str(here)
    found = which("vng")
    if found is None:
        raise MissingFeatureError("virtme-ng (vng) is not installed; run `scripts/install --vm`")
    return found


def vng_env() -> dict[str, str]:
    """Environment for vng: its helper commands (virtme-run, ...) live next to it."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.prefix) / "bin"), env.get("PATH", "")])
    return env


def _cache_file() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "multipath-testbed" / "kvm-probe.json"


def kvm_works(runner: CommandRunner, vng: str, kernel: Path, refresh: bool = False) -> bool:
    """Whether KVM boots this stock kernel here (probed once, result cached per kernel).

    runner: command runner; vng: vng path; kernel: image; refresh: ignore the cache.
    """
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    cache = _cache_file()
    key = f"{kernel}:{kernel.stat().st_mtime_ns}"
    data: dict = {}
    if cache.exists():
        try:
            data = json.loads(cache.read_text())
        except ValueError:
            data = {}
    if not refresh and key in data:
        return bool(data[key])
    ok = False
    try:
        res = runner.run([vng, "--run", str(kernel), "--memory", "512M", "--cpus", "1",
                          "--", "true"], timeout=KVM_PROBE_TIMEOUT, check=False,
                         env=vng_env())
        ok = res.returncode == 0
    except Exception:  # timeouts and hangs mean "KVM does not work here"
        ok = False
    data[key] = ok
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(data, indent=1))
    return ok


def guest_command(cmd: list[str], env: dict[str, str] | None = None,
                  accel: str | None = None) -> str:
    """The shell line the VM runs: the guest helper around cmd, with passed-through env.

    cmd: the user's command; env: environment of the caller (defaults to os.environ);
    accel: ``kvm`` or ``tcg``, passed as ``TESTBED_VM_ACCEL`` (what the guest's
    numbers can be compared with).
    """
    env = dict(os.environ if env is None else env)
    passed = {k: env[k] for k in PASS_ENV if k in env}
    passed.update({k: v for k, v in env.items() if k.startswith("TESTBED_")})
    passed["TESTBED_IN_VM"] = "1"
    # a kernel record made inside (`testbed doctor`, a run's start) lands on this machine
    passed["TESTBED_KERNEL_RECORDS"] = str(records_dir(env))
    if accel is not None:
        passed["TESTBED_VM_ACCEL"] = accel
    passed["PATH"] = os.pathsep.join([str(Path(sys.prefix) / "bin"), "/usr/local/sbin",
                                      "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
    assigns = [f"{k}={v}" for k, v in sorted(passed.items())]
    py = str(Path(sys.prefix) / "bin" / "python")
    return shlex.join(["env", *assigns, py, "-m", "testbed.machine.vm_guest", "--", *cmd])


def cached_trees(prefix: str = sys.prefix) -> list[tuple[str, str]]:
    """The read-only trees the guest mounts a second time with caching on: (tag, path).

    virtme-ng shares the host's root over 9p without a page cache, so under software
    emulation every program start re-reads its binary and libraries from the host
    (about 0.5 s each) and every Python import stats its way over 9p.  ``/usr`` (programs,
    libraries, the system Python with Mininet) and the project's venv do not change while
    the VM runs, so the guest mounts them again, read-only, with ``cache=loose``.  The
    checkout itself stays on the uncached, writable root mount.
    prefix: the venv (default: this interpreter's).
    """
    trees = [("tb_usr", "/usr")]
    venv = Path(prefix)
    if venv.is_dir() and not venv.resolve().is_relative_to("/usr") and _exportable(str(venv)):
        trees.append(("tb_venv", str(venv)))
    return trees


# the guest's writes under these stay in the VM: vng --rw overlays /tmp, and the guest's
# init mounts a fresh tmpfs over /var/tmp (a cluster node's default scratch folder)
PRIVATE_IN_VM = ("/tmp", "/var/tmp")


def _is_private(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in PRIVATE_IN_VM)


def writable_trees(cwd: str) -> list[tuple[str, str]]:
    """The working directory as a writable tree for the guest when vng would hide its writes.

    vng --rw gives the guest a private overlay over /tmp: a checkout cloned under /tmp
    would see its files in the VM, but result bundles written there would never reach
    this machine.  Such a directory is exported again, writable, and mounted over the
    overlay (`writable_mounts`).  cwd: the working directory (absolute).
    """
    if not _is_private(cwd) or cwd in PRIVATE_IN_VM or not _exportable(cwd):
        return []
    return [("tb_cwd", cwd)]


def output_trees(outputs: list[Path], shared: list[str]) -> list[tuple[str, str]]:
    """Result folders the guest must write through to this machine: (tag, path) each.

    A folder under a path the VM keeps private (`PRIVATE_IN_VM`: vng's overlay over /tmp)
    is made here first and exported writable, so the guest mounts it at the same path and
    what the run writes there lands where the user asked.  Folders elsewhere are on the
    shared root already.  outputs: result folders (absolute or relative to the working
    directory); shared: paths already exported (`writable_trees`).
    Raises `InputError` for a private folder that qemu cannot export (a comma or a
    character vng's unquoted shell line cannot carry), before anything starts.
    """
    trees: list[tuple[str, str]] = []
    for out in outputs:
        path = os.path.abspath(out)
        if not _is_private(path) or path in PRIVATE_IN_VM:
            continue
        if any(path == p or path.startswith(p + "/") for p in shared + [t for _, t in trees]):
            continue
        if not _exportable(path):
            raise InputError(f"--out {path}: a results folder under "
                             f"{', '.join(PRIVATE_IN_VM)} must reach the VM through qemu, "
                             "which cannot name a path with spaces, commas or quotes; "
                             "choose a plain path")
        Path(path).mkdir(parents=True, exist_ok=True)
        trees.append((f"tb_out{len(trees)}", path))
    return trees


def record_trees(records: Path, shared: list[str]) -> list[tuple[str, str]]:
    """The kernel records folder (`testbed.machine.kernel.records_dir`) as a writable tree
    when it lies under a path the VM keeps private, so that a record made inside reaches
    this machine; [] when it is on the shared root already (the usual ``~/.cache``) or
    qemu cannot name it (the record then stays in the VM).  shared: paths already
    exported.  Mounted by `record_mounts`.
    """
    path = str(records)
    if not _is_private(path) or path in PRIVATE_IN_VM or not _exportable(path) or any(
            path == p or path.startswith(p + "/") for p in shared):
        return []
    Path(path).mkdir(parents=True, exist_ok=True)
    return [("tb_records", path)]


def record_mounts(trees: list[tuple[str, str]]) -> str:
    """The guest shell line that mounts the records folder; a failure is one line (the
    command still runs, its kernel record stays in the VM)."""
    return _per_tree(trees, lambda tag, q: (
        f"{{ mkdir -p {q} && mount -t 9p -o {WRITABLE_MOUNT_OPTS} {tag} {q}; }} || "
        f"echo 'testbed vm: note: kernel records in '{q}' stay in the VM' >&2"))


def output_mounts(trees: list[tuple[str, str]]) -> str:
    """The guest shell line that mounts each result folder at its own path, or stops the
    VM's command with exit 2 and one line when one cannot be mounted (the run would
    otherwise write into the VM's private overlay and its results would vanish)."""
    return _per_tree(trees, lambda tag, q: (
        f"{{ mkdir -p {q} && mount -t 9p -o {WRITABLE_MOUNT_OPTS} {tag} {q}; }} || "
        f"{{ echo 'testbed vm: error: cannot share '{q}' with the VM, so results written "
        "there would not reach this machine; use a results folder outside /tmp and "
        "/var/tmp' >&2; "
        "exit 2; }"))


def _exportable(path: str) -> bool:
    """Whether qemu's -virtfs can name path: vng joins --qemu-opts unquoted into a shell
    line, and qemu's option syntax cannot carry a comma."""
    return "," not in path and shlex.quote(path) == path


def vng_argv(vng: str, kernel: Path, memory: str, cpus: int, kvm: bool, inner: str,
             cached: list[tuple[str, str]] | None = None,
             writable: list[tuple[str, str]] | None = None) -> list[str]:
    """The vng invocation (pure).

    vng: vng path; kernel: image; memory: e.g. "2G"; cpus: count; kvm: use KVM;
    inner: shell line to run in the guest; cached: (tag, host path) trees exported a
    second time, read-only, for `cached_mounts` (see `cached_trees`); writable: trees
    exported writable for `writable_mounts` (see `writable_trees`).
    """
    argv = [vng, "--run", str(kernel), "--memory", memory, "--cpus", str(cpus), "--rw"]
    if not kvm:
        argv.append("--disable-kvm")
    trees = [(t, p, "") for t, p in writable or []] + \
        [(t, p, "readonly=on,") for t, p in cached or []]
    for tag, path, ro in trees:
        if "," in path:
            continue  # qemu's option syntax cannot carry a comma in a path
        argv.append(f"--qemu-opts=-virtfs local,path={path},mount_tag={tag},"
                    f"security_model=none,{ro}multidevs=remap")
    return [*argv, "--", inner]


# virtme-ng hands the guest its command base64-encoded on the kernel command line, which
# x86 Linux truncates at 2048 bytes (COMMAND_LINE_SIZE): a longer script (mounts, the
# environment, a long `testbed run` line) arrived cut and the guest hung at boot.  So the
# script goes into a file the guest reads (`guest_script`), and the line only names it.
SCRIPT_DIR_NAME = "vm-scripts"


def guest_script(inner: str, folder: Path) -> tuple[Path, str]:
    """Write the guest's shell script into a fresh private file under folder (which the
    guest sees: not under /tmp or /run); return it and the short line that runs it."""
    import tempfile

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="guest-", suffix=".sh", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(inner + "\n")
    return Path(name), f"sh {shlex.quote(name)}"


def script_folder() -> Path:
    """Where `guest_script` writes (beside the KVM probe's cache, in the home folder)."""
    return _cache_file().parent / SCRIPT_DIR_NAME


def writable_mounts(trees: list[tuple[str, str]]) -> str:
    """The guest shell line that mounts the writable trees over the private overlay and
    enters the working directory again (the shell started in the overlay's copy).

    A tree that fails to mount is named on stderr: the command still runs, but what it
    writes there stays in the VM.
    """
    return _per_tree(trees, lambda tag, q: (
        f"{{ mount -t 9p -o {WRITABLE_MOUNT_OPTS} {tag} {q} && cd {q}; }} || "
        f"echo 'testbed vm: warning: '{q}' is private to the VM; files written there do not "
        "reach this machine' >&2"))


def cached_mounts(cached: list[tuple[str, str]]) -> str:
    """The guest shell line that mounts the cached trees over their uncached originals.

    A tree that fails to mount stays on the uncached root (slower, still correct) and
    is named in one line on stderr.
    """
    return _per_tree(cached, lambda tag, q: (
        f"mount -t 9p -o {CACHED_MOUNT_OPTS} {tag} {q} 2>/dev/null || "
        f"echo 'testbed vm: no cached view of '{q}' (slower)' >&2"))


def _per_tree(trees: list[tuple[str, str]], line: Callable[[str, str], str]) -> str:
    """line(tag, quoted path) for each tree qemu can export, joined into one shell line."""
    return "; ".join(line(tag, shlex.quote(path)) for tag, path in trees if "," not in path)


def run_in_vm(cmd: list[str], kernel: Path | None = None, memory: str = "2G", cpus: int = 2,
              kvm: str = "auto", quiet: bool = False,
              outputs: list[Path] | None = None, keep_fds: tuple[int, ...] = ()) -> int:
    """Boot the VM, run cmd inside it with output streamed, return cmd's exit code.

    cmd: command and arguments; kernel: image (default newest in /boot); memory: VM memory;
    cpus: VM CPUs; kvm: "auto" (probe), "on" or "off"; quiet: no status line on stderr;
    outputs: folders cmd writes results into: they reach this machine wherever they are
    (`output_trees`), or the call refuses before booting; keep_fds: file descriptors the
    VM's first process inherits and holds while the VM runs (a cluster node's emulation
    lock: it stays held even when the process that booted the VM dies).
    """
    if not cmd:
        raise InputError("testbed vm: no command given; use `testbed vm -- CMD ARGS...`")
    if os.environ.get("TESTBED_IN_VM") == "1":
        raise InputError("testbed vm: already inside the testbed VM; run the command directly")
    if kvm not in ("auto", "on", "off"):
        raise InputError(f"--kvm {kvm!r}: use auto, on or off")
    if cpus < 1:
        raise InputError(f"--cpus {cpus}: use 1 or more")
    if not re.fullmatch(r"[0-9]+[MG]", memory):
        raise InputError(f"--memory {memory!r}: use e.g. 2G or 1536M")
    image = find_kernel(kernel)
    vng = find_vng()
    if which("qemu-system-x86_64") is None and which("qemu-system-aarch64") is None:
        raise MissingFeatureError("qemu is not installed; run `scripts/install --vm`")
    if which("busybox") is None:
        raise MissingFeatureError("busybox is not installed (virtme-ng needs it for its "
                                  "initramfs); run `scripts/install --vm`")
    runner = CommandRunner()
    use_kvm = {"on": True, "off": False}.get(kvm)
    if use_kvm is None:
        use_kvm = kvm_works(runner, vng, image)
    if not quiet:
        mode = "KVM" if use_kvm else "software emulation (TCG), slower"
        print(f"testbed vm: booting {image.name} with {mode}, {cpus} CPUs, {memory}",
              file=sys.stderr, flush=True)
    writable = writable_trees(os.getcwd())
    outs = output_trees(list(outputs or []), [p for _t, p in writable])
    records = record_trees(records_dir(), [p for _t, p in writable + outs])
    shared = [p for _t, p in writable + outs + records]
    # an existing file there is an input the guest reads (the overlay shows it); what
    # the guest writes under such a path stays in the VM, so only those are named
    private = [a for a in cmd if (a == "/tmp" or a.startswith(("/tmp/", "/run/")))
               and not any(a == p or a.startswith(p + "/") for p in shared)
               and not os.path.isfile(a)]
    if private and not quiet:
        print(f"testbed vm: warning: {private[0]} is private to the VM (a tmpfs/overlay); "
              "files written there do not reach this machine", file=sys.stderr, flush=True)
    t0 = time.time()
    previous = signal.getsignal(signal.SIGTERM)

    def _term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # runner.call stops the VM, then we exit

    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        signal.signal(signal.SIGTERM, _term)
    try:
        cached = [] if os.environ.get("TESTBED_VM_CACHE") == "0" else cached_trees()
        # the writable tree first: the venv may live inside the checkout
        lines = [writable_mounts(writable), output_mounts(outs), record_mounts(records),
                 cached_mounts(cached),
                 guest_command(cmd, accel="kvm" if use_kvm else "tcg")]
        script, line = guest_script("; ".join(line for line in lines if line),
                                    script_folder())
        try:
            rc = runner.call(vng_argv(vng, image, memory, cpus, use_kvm, line, cached,
                                      writable + outs + records), env=vng_env(), relay=True,
                             pass_fds=keep_fds)
        finally:
            script.unlink(missing_ok=True)
    finally:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)
    if not quiet:
        print(f"testbed vm: exit {rc} after {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    return rc
