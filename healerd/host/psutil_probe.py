"""The real host through psutil (and statvfs for inodes, which psutil does not give)."""

from __future__ import annotations

import contextlib
import os
import threading

import psutil

from healerd.host import HostSample, SelfSample


class PsutilProbe:
    def __init__(self) -> None:
        self._me = psutil.Process()
        self._lock = threading.Lock()
        # cpu_percent(None) compares with the previous call: prime it.
        with contextlib.suppress(psutil.Error):
            self._me.cpu_percent(None)

    def sample(self, disk_path: str) -> HostSample:
        mem_total = mem_avail = None
        with contextlib.suppress(OSError, RuntimeError):
            vm = psutil.virtual_memory()
            mem_total, mem_avail = int(vm.total), int(vm.available)
        disk_total = disk_free = inodes_total = inodes_free = None
        if disk_path:
            with contextlib.suppress(OSError):
                st = os.statvfs(disk_path)
                # f_bavail / f_favail: what an unprivileged writer may still use, as df.
                disk_total, disk_free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
                if st.f_files:  # 0 on filesystems without inode limits (btrfs)
                    inodes_total, inodes_free = st.f_files, st.f_favail
        load = None
        with contextlib.suppress(OSError):
            la = os.getloadavg()
            load = (la[0], la[1], la[2])
        return HostSample(
            memory_total=mem_total,
            memory_available=mem_avail,
            disk_path=disk_path,
            disk_total=disk_total,
            disk_free=disk_free,
            inodes_total=inodes_total,
            inodes_free=inodes_free,
            load=load,
            cpus=os.cpu_count(),
        )

    def self_sample(self) -> SelfSample:
        try:
            with self._lock, self._me.oneshot():
                cpu = self._me.cpu_times()
                return SelfSample(
                    rss=int(self._me.memory_info().rss),
                    cpu_percent=float(self._me.cpu_percent(None)),
                    cpu_seconds=float(cpu.user + cpu.system),
                    open_fds=self._me.num_fds(),
                    threads=self._me.num_threads(),
                )
        except (psutil.Error, OSError):
            return SelfSample()
