"""Reading and writing a BPF map by id with the ``bpf(2)`` system call (via ctypes).

A hand-over must reach the sender within milliseconds, and starting ``bpftool`` costs a
fork and an exec (about 0.4 s each in a software-emulated VM), so the notifier talks to
the kernel directly.  Only what it needs: open a map by id, look up, update, iterate.

    m = BpfMap.open(42)
    m.update(b"\\0\\0\\0\\0", value_bytes)
    for key in m.keys(): value = m.lookup(key)
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterator

from testbed.core.errors import MissingFeatureError

SYS_BPF = {"x86_64": 321, "aarch64": 280, "arm64": 280, "s390x": 351, "ppc64le": 361,
           "riscv64": 280}
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_GET_NEXT_KEY = 4
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_ANY = 0


class _ElemAttr(ctypes.Structure):
    """``union bpf_attr`` for the map element commands."""

    _fields_ = [("map_fd", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("key", ctypes.c_uint64), ("value", ctypes.c_uint64),
                ("flags", ctypes.c_uint64)]


class _IdAttr(ctypes.Structure):
    """``union bpf_attr`` for ``BPF_MAP_GET_FD_BY_ID``."""

    _fields_ = [("map_id", ctypes.c_uint32), ("next_id", ctypes.c_uint32),
                ("open_flags", ctypes.c_uint32)]


class _InfoAttr(ctypes.Structure):
    """``union bpf_attr`` for ``BPF_OBJ_GET_INFO_BY_FD``."""

    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32),
                ("info", ctypes.c_uint64)]


class _MapInfo(ctypes.Structure):
    """The head of ``struct bpf_map_info``."""

    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32),
                ("key_size", ctypes.c_uint32), ("value_size", ctypes.c_uint32),
                ("max_entries", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("name", ctypes.c_char * 16)]


_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    nr = SYS_BPF.get(platform.machine())
    if nr is None:
        raise MissingFeatureError(f"bpf(2) number unknown on {platform.machine()}")
    ret = _libc.syscall(nr, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(ret)


class BpfMap:
    """An open BPF map (closed with `close`).  fd: its descriptor."""

    def __init__(self, fd: int):
        self.fd = fd
        info = _MapInfo()
        attr = _InfoAttr(bpf_fd=fd, info_len=ctypes.sizeof(info),
                         info=ctypes.addressof(info))
        _bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
        self.name = info.name.decode(errors="replace")
        self.key_size = info.key_size
        self.value_size = info.value_size

    @classmethod
    def open(cls, map_id: int) -> BpfMap:
        """The map with this id (needs CAP_SYS_ADMIN)."""
        return cls(_bpf(BPF_MAP_GET_FD_BY_ID, _IdAttr(map_id=map_id)))

    def lookup(self, key: bytes) -> bytes | None:
        """The value under key, or None when there is none."""
        k = ctypes.create_string_buffer(key, self.key_size)
        v = ctypes.create_string_buffer(self.value_size)
        try:
            _bpf(BPF_MAP_LOOKUP_ELEM, _ElemAttr(map_fd=self.fd, key=ctypes.addressof(k),
                                                value=ctypes.addressof(v)))
        except FileNotFoundError:
            return None
        return v.raw

    def update(self, key: bytes, value: bytes) -> None:
        """Set key to value."""
        k = ctypes.create_string_buffer(key, self.key_size)
        v = ctypes.create_string_buffer(value, self.value_size)
        _bpf(BPF_MAP_UPDATE_ELEM, _ElemAttr(map_fd=self.fd, key=ctypes.addressof(k),
                                            value=ctypes.addressof(v), flags=BPF_ANY))

    def keys(self) -> Iterator[bytes]:
        """Every key (a hash map's order); keys deleted meanwhile may end the walk early."""
        prev: ctypes.Array[ctypes.c_char] | None = None
        while True:
            nxt = ctypes.create_string_buffer(self.key_size)
            try:
                _bpf(BPF_MAP_GET_NEXT_KEY, _ElemAttr(
                    map_fd=self.fd, key=ctypes.addressof(prev) if prev is not None else 0,
                    value=ctypes.addressof(nxt)))
            except FileNotFoundError:
                return
            yield nxt.raw
            prev = nxt

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
